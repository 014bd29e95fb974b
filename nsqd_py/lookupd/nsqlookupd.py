"""The nsqlookupd program: the registration DB with its TCP and HTTP servers (Go's nsqlookupd.New/Main/Exit)."""

from __future__ import annotations

import socket

from ..http_server.server import WSGIServer
from ..runtime.listen import ListenError, display_address, listen, port_of
from ..runtime.log import Logger
from ..runtime.version import version_line
from .http_api import create_app
from .options import LookupdOptions
from .registration_db import RegistrationDB
from .tcp import LookupdTCPServer


class LookupdStartupError(Exception):
    """The listeners could not be opened; the text is Go's `listen (<addr>) failed - ...`."""


class NSQLookupd:
    def __init__(self, opts: LookupdOptions, logger: Logger) -> None:
        self.opts = opts
        self.logger = logger
        self.db = RegistrationDB()
        #: real ports once listening, for the IDENTIFY reply
        self.tcp_port = 0
        self.http_port = 0
        self.tcp_server: LookupdTCPServer | None = None
        self._http: WSGIServer | None = None
        self._http_address = ""
        self._listeners: list[socket.socket] = []

    def init(self) -> None:
        """Log the version and open both listeners; LookupdStartupError when either fails."""
        self.logger.info(version_line("nsqlookupd"))
        try:
            tcp = self._listen(self.opts.tcp_address)
            http = self._listen(self.opts.http_address)
        except ListenError as err:
            for sock in self._listeners:
                sock.close()
            raise LookupdStartupError(str(err)) from None
        self.tcp_port, self.http_port = port_of(tcp), port_of(http)
        self.tcp_server = LookupdTCPServer(self, tcp)
        self._http_address = display_address(http)
        self._http = WSGIServer(http, create_app(self))

    def _listen(self, address: str) -> socket.socket:
        sock = listen(address)
        self._listeners.append(sock)
        return sock

    def start(self) -> None:
        if self.tcp_server is not None:
            self.tcp_server.start()
        if self._http is not None:
            self.logger.info(f"HTTP: listening on {self._http_address}")
            self._http.start()

    def stop(self) -> None:
        if self.tcp_server is not None:
            self.tcp_server.close()
        if self._http is not None:
            self.logger.info(f"HTTP: closing {self._http_address}")
            self._http.stop(timeout=1)
