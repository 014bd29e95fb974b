"""Serving the HTTP API inside the nsqd process on gevent's pywsgi: one greenlet per connection, so a client
trickling a request in holds up only itself. Connection rules like Go's come from `handler.Handler`."""

from __future__ import annotations

import socket

from gevent.pywsgi import WSGIServer

from ..core.nsqd import NSQD
from ..listen import display_address
from .app import create_app
from .handler import Handler


class HTTPServer:
    def __init__(self, nsqd: NSQD, listener: socket.socket, name: str = "HTTP") -> None:
        self.nsqd = nsqd
        self.name = name
        self.address = display_address(listener)
        self._server = WSGIServer(listener, create_app(nsqd), log=None, error_log=None, handler_class=Handler)

    def start(self) -> None:
        self.nsqd.logger.info(f"{self.name}: listening on {self.address}")
        self._server.start()

    def close(self) -> None:
        self.nsqd.logger.info(f"{self.name}: closing {self.address}")
        self._server.stop(timeout=1)
