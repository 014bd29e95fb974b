"""What nsqd's front doors (TCP, HTTP, HTTPS) share besides the broker: TLS, auth, the lookup loop and the
ports they listen on. daemon/program.py builds it; core/ never sees it, so the broker knows no sockets or cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

    from ..config.options import Options
    from ..core.nsqd import NSQD
    from ..runtime.log import Logger
    from .auth import AuthServers
    from .lookup import LookupLoop


@dataclass(eq=False)
class ServerContext:
    nsqd: NSQD
    #: the server TLS context when --tls-cert/--tls-key are set (tls_v1 and HTTPS need it)
    tls_context: ssl.SSLContext | None = None
    #: set when --auth-http-address is given: clients must AUTH before PUB/SUB
    auth_servers: AuthServers | None = None
    #: the nsqlookupd registration loop (PUT /config/nsqlookupd_tcp_addresses reaches it here)
    lookup: LookupLoop | None = None
    #: real ports once listening (-1 for a unix socket), for /info and the TLS-required answer
    tcp_port: int = 0
    http_port: int = 0
    https_port: int = 0

    @property
    def opts(self) -> Options:
        return self.nsqd.opts

    @property
    def logger(self) -> Logger:
        return self.nsqd.logger
