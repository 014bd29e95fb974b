"""An I/O worker process (issue 37): serves protocol V2 clients accepted on the broker's TCP listener.

Started by worker_pool.py (in the broker) with the listener and its end of the link as inherited descriptors. It
ignores SIGINT and SIGTERM (a service manager signals the whole group): the broker says when to stop (EXIT), after it
closed its own listener, and a worker whose broker is gone exits at once.
"""

from __future__ import annotations

import pickle
import signal
import socket
import ssl
import sys

import gevent
from gevent.server import StreamServer

from ..cluster.auth import AuthServers
from ..config.options import Options
from ..config.tlsconfig import build_server_context
from ..runtime.link import Link
from ..runtime.log import Logger
from ..runtime.outbox import Outbox
from ..tcp import records
from ..tcp.server import greet
from ..tcp.worker_protocol import ForwardingClient, WorkerEnd, WorkerProtocolV2
from .gevent_patch import patch_all

#: how long a stopping worker lets its connections finish their last sends
_DRAIN_SECONDS = 2.0


class WorkerProcess:
    """The worker process: its listener, and its end of the link to the broker."""

    def __init__(self, listener: socket.socket, link: Link) -> None:
        self.listener = listener
        self.link = link
        self.connections = WorkerEnd()
        self._next_conn = 0
        self._outbox = Outbox()
        self._server: StreamServer | None = None
        self.opts = Options()
        self.logger = Logger("")
        self._auth_servers: AuthServers | None = None
        self._tls_context: ssl.SSLContext | None = None

    def run(self) -> None:
        """Serve until the broker says EXIT or goes away."""
        self.link.run(self._handle)
        for client in list(self.connections.clients.values()):
            client.close()
        self.link.close()

    def _handle(self, kind: int, conn: int, payload: bytes) -> None:
        if kind == records.HELLO:
            self._start(pickle.loads(payload))
        elif kind == records.EXIT:
            gevent.spawn(self._stop)
        else:
            self.connections.handle(kind, conn, payload)

    def _start(self, opts: Options) -> None:
        self.opts = opts
        self.logger = Logger(opts.log_prefix, opts.log_level)
        self._auth_servers = AuthServers.from_options(opts, self.logger)
        self._tls_context = build_server_context(opts)
        self._server = StreamServer(self.listener, self._serve)
        self._server.start()

    def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        clients = self.connections.clients
        for client in list(clients.values()):
            client.close()
        with gevent.Timeout(_DRAIN_SECONDS, False):
            while clients:
                gevent.sleep(0.01)
        self.link.flush()
        self.link.shutdown()

    def _serve(self, sock: socket.socket, address: object) -> None:
        opts, logger = self.opts, self.logger
        remote = greet(sock, address, logger)
        if remote is None:
            return
        self._next_conn += 1
        conn = self._next_conn
        client = ForwardingClient(opts, logger, conn, sock, remote, self._outbox, self.link)
        self.connections.clients[conn] = client
        self.link.send(records.OPEN, conn, remote.encode())
        try:
            WorkerProtocolV2(opts, logger, self._auth_servers, self._tls_context, client).io_loop()
        finally:
            self.connections.clients.pop(conn, None)
            self.link.send(records.CLOSED, conn)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    patch_all()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    listener = socket.socket(fileno=int(args[0]))
    link = Link(socket.socket(fileno=int(args[1])))
    WorkerProcess(listener, link).run()


if __name__ == "__main__":
    main()
