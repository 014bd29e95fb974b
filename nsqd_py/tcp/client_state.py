"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

What nsqd keeps of a protocol V2 client wherever its socket is served: its identity and what /stats shows of it
(client_stats.py reads these), its channel, and the delivery state a channel reads (`Consumer`). A connection served
in this process is a `client.ClientV2`; one an I/O worker serves is the broker's `remote_clients.RemoteClient`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..core.consumer import Consumer

if TYPE_CHECKING:
    from ..core.channel import Channel


class ClientState(Consumer):
    __slots__ = (
        "auth_identity",
        "auth_identity_url",
        "authed",
        "channel",
        "client_id",
        "connect_ts",
        "deflate",
        "hostname",
        "id",
        "pub_counts",
        "remote_address",
        "snappy",
        "tls",
        "tls_cipher_suite",
        "tls_negotiated_protocol",
        "tls_negotiated_protocol_is_mutual",
        "tls_version",
        "topology_region",
        "topology_zone",
        "user_agent",
    )

    def __init__(self, client_id: int, remote_address: str, msg_timeout: float) -> None:
        super().__init__()
        self.id = client_id
        self.remote_address = remote_address
        host = remote_address.rsplit(":", 1)[0] if ":" in remote_address else remote_address
        self.client_id = host
        self.hostname = host
        self.user_agent = ""
        self.connect_ts = int(time.time())
        self.msg_timeout = msg_timeout
        self.channel: Channel | None = None
        #: messages published, by topic name
        self.pub_counts: dict[str, int] = {}
        self.deflate = False
        self.snappy = False
        self.tls = False
        self.tls_version = ""
        self.tls_cipher_suite = ""
        self.tls_negotiated_protocol = ""
        self.tls_negotiated_protocol_is_mutual = False
        self.authed = False
        self.auth_identity = ""
        self.auth_identity_url = ""
        self.topology_zone = ""
        self.topology_region = ""

    def published(self, topic: str, count: int) -> None:
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count
