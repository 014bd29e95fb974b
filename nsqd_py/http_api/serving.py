"""Serving the HTTP API (and HTTPS) inside the nsqd process on the http_server/ transport: one greenlet per
connection, so a client trickling a request in holds up only itself."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from ..cluster.context import ServerContext
from ..http_server.server import WSGIServer
from ..runtime.listen import display_address, remove_socket_file, unix_path
from .app import create_app

if TYPE_CHECKING:
    import ssl


class HTTPServer:
    """``ssl_context`` makes it the HTTPS listener (which TLS-required never turns away)."""

    def __init__(self, ctx: ServerContext, listener: socket.socket, name: str = "HTTP",
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.logger = ctx.logger
        self.name = name
        self.address = display_address(listener)
        self._unix_path = unix_path(listener)
        app = create_app(ctx, tls_enabled=ssl_context is not None)
        self._server = WSGIServer(listener, app, ssl_context=ssl_context)

    def start(self) -> None:
        self.logger.info(f"{self.name}: listening on {self.address}")
        self._server.start()

    def close(self) -> None:
        self.logger.info(f"{self.name}: closing {self.address}")
        self._server.stop(timeout=1)
        remove_socket_file(self._unix_path)
