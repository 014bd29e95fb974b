"""The nsqd program: builds the broker and its front doors, starts them, stops them in nsqd's order."""

from __future__ import annotations

import signal
import socket
from typing import TYPE_CHECKING

import gevent

from ..cluster.auth import AuthServers
from ..cluster.context import ServerContext
from ..cluster.lookup import LookupLoop
from ..cluster.statsd import StatsdPusher
from ..config.options import DRAIN, Options
from ..config.tlsconfig import TLSConfigError, build_server_context
from ..config.worker_count import io_worker_count
from ..core.nsqd import NSQD, StartupError
from ..http_api.serving import HTTPServer
from ..runtime.busy_poll import busy_poll_seconds
from ..runtime.listen import ListenError, listen, port_of
from ..runtime.log import Logger
from ..runtime.version import version_line
from ..tcp.server import TCPServer
from . import sdnotify

if TYPE_CHECKING:
    from gevent.queue import Queue

    from .worker_pool import WorkerPool

#: how long stop() waits for connection greenlets to notice their closed sockets
_DRAIN_SECONDS = 2.0


class NSQDProgram:
    """Owns the broker and the wiring around it: listeners, servers, the lookup loop and statsd (`ctx`)."""

    def __init__(self, opts: Options, logger: Logger, external_http_port: int | None = None) -> None:
        """``external_http_port``: the HTTP API is served outside the program (by gunicorn) on this port, -1 for a
        unix socket; no HTTP listener of its own, but that port is the one reported (/info, lookupd, statsd)."""
        self.opts = opts
        self.logger = logger
        self.nsqd = NSQD(opts, logger)
        self.ctx = ServerContext(self.nsqd, auth_servers=AuthServers.from_options(opts, logger))
        self.external_http_port = external_http_port
        self.tcp_server: TCPServer | WorkerPool | None = None
        self.http_server: HTTPServer | None = None
        self.https_server: HTTPServer | None = None
        self._sockets: list[socket.socket] = []
        self.statsd = StatsdPusher(self.nsqd)

    def init(self) -> None:
        """Lock the data dir, open the listeners, load metadata; StartupError on any failure."""
        opts, log, nsqd, ctx = self.opts, self.logger, self.nsqd, self.ctx
        log.info(version_line())
        log.info(f"ID: {opts.node_id}")
        nsqd.lock_data_path()
        try:
            ctx.tls_context = build_server_context(opts)
        except TLSConfigError as err:
            raise StartupError(str(err)) from None
        try:
            self._open_servers()
        except ListenError as err:
            self._close_sockets()
            raise StartupError(str(err)) from None
        opts.apply_listen_ports(
            ctx.tcp_port if ctx.tcp_port > 0 else None, ctx.http_port if ctx.http_port > 0 else None
        )
        nsqd.load_metadata()
        try:
            nsqd.persist_metadata()
        except OSError as err:
            raise StartupError(f"failed to persist metadata - {err}") from None
        ctx.lookup = LookupLoop(nsqd)

    def _open_servers(self) -> None:
        """Listen on TCP, HTTP (unless gunicorn serves it) and HTTPS (with TLS configured); ListenError."""
        opts, ctx = self.opts, self.ctx
        tcp = self._listen(opts.tcp_address)
        try:
            workers = io_worker_count()
            busy_poll_seconds()  # checked here, so that a bad value stops nsqd at start with a FATAL line
        except ValueError as err:
            raise StartupError(str(err)) from None
        if workers:
            from .worker_pool import WorkerPool  # here: the default mode does without its imports

            self.tcp_server = WorkerPool(ctx, tcp, workers)
        else:
            self.tcp_server = TCPServer(ctx, tcp)
        ctx.tcp_port = port_of(tcp)
        if self.external_http_port is not None:
            ctx.http_port = self.external_http_port
        elif opts.http_address:
            http = self._listen(opts.http_address)
            self.http_server = HTTPServer(ctx, http)
            ctx.http_port = port_of(http)
        if ctx.tls_context is not None and opts.https_address:
            https = self._listen(opts.https_address)
            self.https_server = HTTPServer(ctx, https, name="HTTPS", ssl_context=ctx.tls_context)
            ctx.https_port = port_of(https)

    def _listen(self, address: str) -> socket.socket:
        sock = listen(address)
        self._sockets.append(sock)
        return sock

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()

    def start(self) -> None:
        if self.tcp_server is not None:
            self.tcp_server.start()
        for server in (self.http_server, self.https_server):
            if server is not None:
                server.start()
        self.nsqd.start()
        if self.ctx.lookup is not None:
            self.ctx.lookup.start()
        self.statsd.start()
        sdnotify.ready()

    def until_stopped(self, signals: Queue[int]) -> None:
        """Until SIGINT, SIGTERM (with --sigterm=drain: the end of the drain it starts; another SIGTERM changes
        nothing), PUT /config/shutdown or the end of a drain PUT /config/drain started."""
        taking = gevent.spawn(self._take_signals, signals)
        try:
            self.nsqd.stop_requested.wait()
        finally:
            taking.kill()

    def _take_signals(self, signals: Queue[int]) -> None:
        while True:
            sig = signals.get()
            if sig == signal.SIGTERM and self.opts.sigterm == DRAIN:
                self.nsqd.drain()
            else:
                self.nsqd.request_stop()

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
        if self.ctx.lookup is not None:
            self.ctx.lookup.close()
        self.statsd.close()
        self.nsqd.exit()

    def _wait_for_connections(self) -> None:
        if self.tcp_server is None:
            return
        deadline = _DRAIN_SECONDS
        while self.tcp_server.connections and deadline > 0:
            gevent.sleep(0.01)
            deadline -= 0.01
