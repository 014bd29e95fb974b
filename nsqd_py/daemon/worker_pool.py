"""The TCP front door split over I/O worker processes (issue 37; NSQD_PY_IO_WORKERS=N, N >= 1).

Every worker accepts on the one TCP listener (inherited) and serves its clients' sockets; this process stays the
broker: topics, channels, in-flight messages, disks, HTTP. Each worker has one link to the broker (a unix socket
pair), whose end here is a `tcp.remote_clients.BrokerEnd` (the worker process, worker_process.py, holds the
other). A worker that dies is replaced; its clients' in-flight messages time out back into their channels, as for
any client that goes away.
"""

from __future__ import annotations

import pickle
import socket
import sys
from typing import TYPE_CHECKING

import gevent

from ..cluster.context import ServerContext
from ..runtime.link import Link
from ..runtime.listen import display_address, remove_socket_file, unix_path
from ..tcp import records
from ..tcp.remote_clients import BrokerEnd, RemoteClient

if TYPE_CHECKING:
    from gevent.subprocess import Popen

#: how long a stopping worker may take to close its connections and exit before it is killed
_EXIT_SECONDS = 5.0


class _Worker:
    def __init__(self, process: Popen, clients: BrokerEnd) -> None:
        self.process = process
        self.clients = clients


class WorkerPool:
    """Stands where tcp.server.TCPServer stands when connections are served by worker processes."""

    def __init__(self, ctx: ServerContext, listener: socket.socket, count: int) -> None:
        self.ctx = ctx
        self.nsqd = ctx.nsqd
        self.listener = listener
        self.address = display_address(listener)
        self._unix_path = unix_path(listener)
        self.count = count
        self._workers: list[_Worker] = []
        self._stopping = False

    @property
    def connections(self) -> dict[int, RemoteClient]:
        return {client.id: client for worker in self._workers for client in worker.clients.clients.values()}

    def start(self) -> None:
        self.nsqd.logger.info(f"TCP: listening on {self.address}")
        for _ in range(self.count):
            self._start_worker()

    def _start_worker(self) -> None:
        from gevent import subprocess  # here: its import costs nsqd's start-up ~12 ms, and only workers need it

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = (self.listener.fileno(), theirs.fileno())
        command = [sys.executable, "-m", "nsqd_py.daemon.worker_process", *map(str, fds)]
        process = subprocess.Popen(command, pass_fds=fds)
        theirs.close()
        link = Link(ours)
        link.send(records.HELLO, 0, pickle.dumps(self.ctx.opts))
        worker = _Worker(process, BrokerEnd(self.nsqd, link))
        self._workers.append(worker)
        gevent.spawn(self._serve, worker)

    def _serve(self, worker: _Worker) -> None:
        clients = worker.clients
        clients.link.run(clients.handle, clients.after_read)
        clients.drop_all()
        clients.link.close()
        self._workers.remove(worker)
        if not self._stopping:
            code = worker.process.wait()
            self.nsqd.logger.error(f"TCP: I/O worker {worker.process.pid} exited ({code}), starting another")
            self._start_worker()

    def close_listener(self) -> None:
        """Stop accepting: ours closes now, each worker closes its copy and its connections (EXIT)."""
        self.nsqd.logger.info(f"TCP: closing {self.address}")
        self._stopping = True
        for worker in self._workers:
            worker.clients.link.send(records.EXIT, 0)
        self.listener.close()
        remove_socket_file(self._unix_path)

    def close_clients(self) -> None:
        """Wait for the workers to close their connections and exit (they were told in close_listener)."""
        from gevent.subprocess import TimeoutExpired

        for worker in list(self._workers):
            try:
                worker.process.wait(timeout=_EXIT_SECONDS)
            except TimeoutExpired:
                worker.process.kill()
