"""Drive third-party NSQ clients against the real nsqd: pynsq on a tornado IOLoop in a thread, gnsq on gevent.

gnsq runs its greenlets on the gevent hub of the main (test) thread, so every wait in these tests goes
through :func:`wait_until`, which yields to gevent instead of blocking the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import gnsq
import nsq
from tornado.ioloop import IOLoop

from tests.support import NsqdProcess, wait_until


def settle(count: Callable[[], int], quiet: float = 1.0, timeout: float = 20) -> int:
    """Wait until ``count()`` stops changing for ``quiet`` seconds; return the final value."""
    deadline = time.monotonic() + timeout
    last, since = count(), time.monotonic()
    while time.monotonic() < deadline:
        gevent.sleep(0.05)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    raise AssertionError(f"count never settled (last {last})")


def pause(seconds: float) -> None:
    """Let time pass while gnsq greenlets keep running (used to prove that something does NOT happen)."""
    gevent.sleep(seconds)


class IOLoopThread:
    """A tornado IOLoop running in a daemon thread; pynsq objects are created and used only on it."""

    def __init__(self) -> None:
        self.loop: IOLoop | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pynsq-ioloop", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("tornado IOLoop thread did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        self.loop = IOLoop.current()
        self.loop.add_callback(self._started.set)
        self.loop.start()
        self.loop.close(all_fds=True)

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Schedule ``fn`` on the loop thread; the returned future holds its result."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

        assert self.loop is not None
        self.loop.add_callback(run)
        return fut

    def call(self, fn: Callable[[], Any], timeout: float = 10) -> Any:
        """Run ``fn`` on the loop thread and return its result (waiting cooperatively)."""
        return wait_future(self.submit(fn), timeout)

    def stop(self) -> None:
        if self.loop is not None and self._thread.is_alive():
            self.loop.add_callback(self.loop.stop)
            self._thread.join(10)


def wait_future(fut: concurrent.futures.Future, timeout: float = 10) -> Any:
    wait_until(fut.done, timeout, interval=0.005, what="a result from the pynsq IOLoop thread")
    return fut.result()


@dataclass
class Received:
    """One delivery as a client library saw it."""

    at: float
    id: bytes
    body: bytes
    attempts: int
    timestamp: int
    handle: Any  # the library's message object (pynsq or gnsq)


class PynsqWriter:
    """An ``nsq.Writer`` on an :class:`IOLoopThread`, with synchronous publish helpers."""

    def __init__(self, io: IOLoopThread, address: str, **conn_kwargs: Any) -> None:
        self.io = io
        self.writer: nsq.Writer = io.call(lambda: nsq.Writer([address], **conn_kwargs))
        wait_until(lambda: io.call(lambda: any(c.connected() for c in self.writer.conns.values())),
                   what="pynsq Writer connection")

    def _publish(self, method: str, *args: Any, timeout: float = 10) -> bytes:
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def callback(conn: Any, data: Any) -> None:
            fut.set_result(data)

        self.io.call(lambda: getattr(self.writer, method)(*args, callback=callback))
        data = wait_future(fut, timeout)
        if isinstance(data, Exception):
            raise data
        return data

    def pub(self, topic: str, body: bytes) -> bytes:
        return self._publish("pub", topic, body)

    def mpub(self, topic: str, bodies: list[bytes]) -> bytes:
        return self._publish("mpub", topic, bodies)

    def dpub(self, topic: str, delay_ms: int, body: bytes) -> bytes:
        return self._publish("dpub", topic, delay_ms, body)

    def close(self) -> None:
        def close_all() -> None:
            for conn in list(self.writer.conns.values()):
                conn.off("close", self.writer._on_connection_close)  # no reconnect timer
                conn.close()

        self.io.call(close_all)


class PynsqReader:
    """An ``nsq.Reader`` on an :class:`IOLoopThread` that records deliveries.

    With ``auto_finish`` every message is FINished by returning True; otherwise it is left in flight
    (async mode) for the test to FIN/REQ/TOUCH through :meth:`finish`, :meth:`requeue` and :meth:`touch`.
    """

    def __init__(self, io: IOLoopThread, address: str, topic: str, channel: str, *, auto_finish: bool = True,
                 max_in_flight: int = 1, **conn_kwargs: Any) -> None:
        self.io = io
        self.auto_finish = auto_finish
        self.received: list[Received] = []
        self.errors: list[str] = []
        self.responses: list[bytes] = []
        self.heartbeats = 0
        self.reader: nsq.Reader = io.call(lambda: self._create(topic, channel, address, max_in_flight, conn_kwargs))
        wait_until(lambda: b"OK" in self.responses, what="pynsq Reader SUB to be acknowledged")

    def _create(self, topic: str, channel: str, address: str, max_in_flight: int, kwargs: dict) -> nsq.Reader:
        reader = nsq.Reader(topic=topic, channel=channel, nsqd_tcp_addresses=[address], max_in_flight=max_in_flight,
                            message_handler=self._handle, **kwargs)
        # Hooks are bound when the reader connects (on a later loop iteration), so wrapping them here is in time.
        on_error, on_heartbeat = reader._on_connection_error, reader._on_heartbeat
        on_ready = reader._on_connection_ready

        def record_error(conn: Any, error: Any, **kw: Any) -> None:
            self.errors.append(str(error))
            on_error(conn, error, **kw)

        def record_heartbeat(conn: Any, **kw: Any) -> None:
            self.heartbeats += 1
            on_heartbeat(conn, **kw)

        def record_responses(conn: Any, **kw: Any) -> None:
            conn.on("response", lambda conn, data, **_: self.responses.append(data))  # the SUB's OK comes next
            on_ready(conn, **kw)

        reader._on_connection_error, reader._on_heartbeat = record_error, record_heartbeat
        reader._on_connection_ready = record_responses
        return reader

    def _handle(self, message: nsq.Message) -> bool | None:
        self.received.append(Received(time.monotonic(), message.id, message.body, message.attempts,
                                      message.timestamp, message))
        if self.auto_finish:
            return True
        message.enable_async()
        return None

    @property
    def bodies(self) -> list[bytes]:
        return [r.body for r in self.received]

    def delivery(self, n: int, timeout: float = 10, what: str = "delivery") -> Received:
        """The ``n``-th delivery (from 1), once it has come."""
        return wait_until(lambda: len(self.received) >= n and self.received[n - 1], timeout=timeout,
                          what=f"{what} {n}")

    def finish(self, r: Received) -> None:
        self.io.call(r.handle.finish)

    def requeue(self, r: Received, delay_ms: int) -> None:
        self.io.call(lambda: r.handle.requeue(time_ms=delay_ms, backoff=False))

    def touch(self, r: Received) -> None:
        self.io.call(r.handle.touch)

    def connected(self) -> bool:
        return self.io.call(lambda: any(c.connected() for c in self.reader.conns.values()))

    def close(self) -> None:
        self.io.call(self.reader.close)


class GnsqCollector:
    """A started ``gnsq.Consumer`` that records deliveries (auto-FIN unless ``auto_finish`` is False)."""

    def __init__(self, address: str, topic: str, channel: str, *, auto_finish: bool = True, **kwargs: Any) -> None:
        self.auto_finish = auto_finish
        self.received: list[Received] = []
        self.responses: list[bytes] = []
        self.consumer = gnsq.Consumer(topic, channel, [address], message_handler=self._handle, **kwargs)
        self.consumer.on_response.connect(lambda _, response: self.responses.append(response), weak=False)
        self.consumer.start(block=False)
        # IDENTIFY is answered with JSON, so the first OK acknowledges the SUB: the channel exists from now on.
        wait_until(lambda: b"OK" in self.responses, what="gnsq Consumer SUB to be acknowledged")

    def _handle(self, consumer: gnsq.Consumer, message: gnsq.Message) -> None:
        self.received.append(Received(time.monotonic(), message.id, message.body, message.attempts,
                                      message.timestamp, message))
        if not self.auto_finish:
            message.enable_async()

    @property
    def bodies(self) -> list[bytes]:
        return [r.body for r in self.received]

    def delivery(self, n: int, timeout: float = 10, what: str = "delivery") -> Received:
        """The ``n``-th delivery (from 1), once it has come."""
        return wait_until(lambda: len(self.received) >= n and self.received[n - 1], timeout=timeout,
                          what=f"{what} {n}")

    def close(self) -> None:
        self.consumer.close()
        self.consumer.join(timeout=5)


def gnsq_producer(address: str) -> gnsq.Producer:
    producer = gnsq.Producer([address])
    producer.start()
    return producer


def gnsq_connection(port: int, **kwargs: Any) -> gnsq.NsqdTCPClient:
    """A low-level gnsq connection, connected and IDENTIFYed (responses are read by the caller)."""
    conn = gnsq.NsqdTCPClient("127.0.0.1", port, **kwargs)
    conn.connect()
    conn.identify()
    return conn


NsqdFactory = Callable[..., NsqdProcess]
