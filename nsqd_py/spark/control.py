"""A clean stop for streaming reads: the running micro-batch finishes, and driver-mode readers drain first.

Reading on the executors (the default), nothing is held between batches: stopping between them is clean, and a batch
stopped midway is replayed from its slices. In readMode=driver, Spark commits a micro-batch to the source only when it
plans the next one, and ends the reader's process when the query stops, so `query.stop()` alone leaves the last batch
unFINed: nsqd redelivers it after msg_timeout and it is processed twice. `stop_gracefully` first asks every such
reader to drain: a draining reader takes no new messages and hands back (REQ) what it buffered, and reports one more,
empty, batch so that Spark commits (FIN) the last one. Once nothing is unsettled, the query is stopped.

The reader runs in a Python process started by the driver's JVM, on the host where the query was started; it
listens on a Unix socket named after its topic and channel (one reading query per channel, as for any consumer).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable

from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

_DRAIN = b"drain\n"
_DRAINED = b"drained\n"
_POLL = 0.05


def socket_path(topic: str, channel: str) -> str:
    """Hashed: topic and channel names may be longer than a socket path allows."""
    digest = hashlib.sha256(f"{topic}/{channel}".encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"nsqd_py-spark-{os.getuid()}", f"{digest}.sock")


class DrainServer:
    """Answers drain requests for one reader on a daemon thread: ``drain()`` once, then ``settled()`` is polled
    until it holds, and the client is told."""

    def __init__(self, path: str, drain: Callable[[], None], settled: Callable[[], bool]) -> None:
        self.path = path
        self._drain = drain
        self._settled = settled
        self._sock: socket.socket | None = None

    def start(self) -> bool:
        """Listen; False (and a warning) when a live reader already serves this topic/channel on this host or the
        socket cannot be created: the reader works on, only without a clean stop."""
        try:
            self._sock = self._listen()
        except OSError as err:
            log.warning("no clean stop for this reader: %s", err)
            return False
        if self._sock is None:
            log.warning("another reader on this host serves %s: no clean stop for this one", self.path)
            return False
        threading.Thread(target=self._serve, args=(self._sock,), name="nsq-drain", daemon=True).start()
        return True

    def _listen(self) -> socket.socket | None:
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        if os.path.exists(self.path):
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(self.path)
                return None
            except OSError:
                os.unlink(self.path)  # left behind by a killed reader
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(self.path)
            sock.listen()
        except OSError:
            sock.close()
            raise
        return sock

    def close(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def _serve(self, sock: socket.socket) -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:  # closed
                return
            with client:
                if client.recv(len(_DRAIN)) != _DRAIN:
                    continue
                self._drain()
                while not self._settled():
                    time.sleep(_POLL)
                with contextlib.suppress(OSError):  # the client may have given up waiting
                    client.sendall(_DRAINED)


def stop_gracefully(query: StreamingQuery, sources: Iterable[tuple[str, str]], timeout: float = 60.0) -> bool:
    """Drain the readers of ``query`` (its format("nsq") sources as (topic, channel) pairs), then stop it.

    Returns whether every reader drained within ``timeout`` (the query is stopped either way). Draining takes up to
    one trigger interval plus the batch running at the time. A reader that has not started, or that reads on the
    executors (it listens on no socket), has nothing to drain.
    """
    deadline = time.monotonic() + timeout
    waiting: list[socket.socket] = []
    try:
        for topic, channel in sources:
            client = socket.socket(socket.AF_UNIX)
            try:
                client.connect(socket_path(topic, channel))
                client.sendall(_DRAIN)
            except OSError:
                client.close()
                continue
            waiting.append(client)
        drained = all(_await(client, query, deadline) for client in waiting)
    finally:
        for client in waiting:
            client.close()
    _await_idle(query, deadline)
    query.stop()
    return drained


def _await_idle(query: StreamingQuery, deadline: float) -> None:
    """Let the running micro-batch finish: `stop()` would interrupt it, and Spark logs the aborted job as an error."""
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(_POLL)


def _await(client: socket.socket, query: StreamingQuery, deadline: float) -> bool:
    client.settimeout(0.5)
    while query.isActive and time.monotonic() < deadline:
        try:
            return client.recv(len(_DRAINED)) == _DRAINED
        except TimeoutError:
            continue
        except OSError:
            return False
    return False
