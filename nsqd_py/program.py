"""The nsqd program: builds the broker and its front doors, starts them, stops them in nsqd's order."""

from __future__ import annotations

import socket

import gevent

from . import sdnotify
from .cluster.lookup import LookupLoop
from .cluster.statsd import StatsdPusher
from .core.nsqd import NSQD, StartupError
from .http.server import HTTPServer
from .listen import ListenError, listen, port_of
from .log import Logger
from .options import Options
from .tcp.server import TCPServer
from .tlsconfig import TLSConfigError, build_server_context
from .version import version_line

#: how long stop() waits for connection greenlets to notice their closed sockets
_DRAIN_SECONDS = 2.0


class NSQDProgram:
    def __init__(self, opts: Options, logger: Logger, external_http_port: int | None = None) -> None:
        """``external_http_port``: the HTTP API is served outside the program (by gunicorn) on this port, -1 for a
        unix socket; no HTTP listener of its own, but that port is the one reported (/info, lookupd, statsd)."""
        self.opts = opts
        self.logger = logger
        self.nsqd = NSQD(opts, logger)
        self.external_http_port = external_http_port
        self.tcp_server: TCPServer | None = None
        self.http_server: HTTPServer | None = None
        self.https_server: HTTPServer | None = None
        self._listeners: list[socket.socket] = []
        self.lookup: LookupLoop | None = None
        self.statsd = StatsdPusher(self.nsqd)

    def init(self) -> None:
        """Lock the data dir, open the listeners, load metadata; StartupError on any failure."""
        opts, log, nsqd = self.opts, self.logger, self.nsqd
        log.info(version_line())
        log.info(f"ID: {opts.node_id}")
        nsqd.lock_data_path()
        try:
            nsqd.tls_context = build_server_context(opts)
        except TLSConfigError as err:
            raise StartupError(str(err)) from None
        try:
            tcp = self._listen(opts.tcp_address)
            self.tcp_server = TCPServer(nsqd, tcp)
            nsqd.tcp_port = port_of(tcp)
            if self.external_http_port is not None:
                nsqd.http_port = self.external_http_port
            elif opts.http_address:
                http = self._listen(opts.http_address)
                self.http_server = HTTPServer(nsqd, http)
                nsqd.http_port = port_of(http)
            if nsqd.tls_context is not None and opts.https_address:
                https = self._listen(opts.https_address)
                self.https_server = HTTPServer(nsqd, https, name="HTTPS", ssl_context=nsqd.tls_context)
                nsqd.https_port = port_of(https)
        except ListenError as err:
            self._close_listeners()
            raise StartupError(str(err)) from None
        opts.apply_listen_ports(
            nsqd.tcp_port if nsqd.tcp_port > 0 else None, nsqd.http_port if nsqd.http_port > 0 else None
        )
        nsqd.load_metadata()
        try:
            nsqd.persist_metadata()
        except OSError as err:
            raise StartupError(f"failed to persist metadata - {err}") from None
        self.lookup = nsqd.lookup = LookupLoop(nsqd)

    def _listen(self, address: str) -> socket.socket:
        sock = listen(address)
        self._listeners.append(sock)
        return sock

    def _close_listeners(self) -> None:
        for sock in self._listeners:
            sock.close()

    def start(self) -> None:
        if self.tcp_server is not None:
            self.tcp_server.start()
        for server in (self.http_server, self.https_server):
            if server is not None:
                server.start()
        self.nsqd.start()
        if self.lookup is not None:
            self.lookup.start()
        self.statsd.start()
        sdnotify.ready()

    def stop(self) -> None:
        """Listeners first, then clients, then flush everything to disk (NSQD.exit)."""
        sdnotify.stopping()
        if self.tcp_server is not None:
            self.tcp_server.close_listener()
            self.tcp_server.close_clients()
        for server in (self.http_server, self.https_server):
            if server is not None:
                server.close()
        self._wait_for_connections()
        if self.lookup is not None:
            self.lookup.close()
        self.statsd.close()
        self.nsqd.exit()

    def _wait_for_connections(self) -> None:
        if self.tcp_server is None:
            return
        deadline = _DRAIN_SECONDS
        while self.tcp_server.connections and deadline > 0:
            gevent.sleep(0.01)
            deadline -= 0.01
