"""Load the way applications use nsqd: one message per round trip (standard library only).

* ``pub_loop``: single-message PUBs from many connections, each sending its next PUB once its OK arrived (what
  go-nsq's ``Producer.Publish()`` and pynsq's ``Writer.pub()`` do), with the latency of every PUB.
* ``rdy1_consume``: consumers at RDY 1 (go-nsq's and pynsq's default max-in-flight): one message, FIN, the next.

The paced publish -> deliver load is bench/paced.py's (in C).

The connections are spread over worker processes (``procs``) so that a Python client is not the slow side:
each process drives its connections from one selector loop.
"""

from __future__ import annotations

import multiprocessing
import selectors
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from benchlib import II, read_frame

_BODY = b"x" * 200
_OK = II.pack(6, 0) + b"OK"
_FRAME_MESSAGE = 2
_HEARTBEAT = b"_heartbeat_"


@dataclass
class Outcome:
    count: int  # messages acknowledged (PUB) or FINed (consume) inside the timed window
    seconds: float
    latencies_us: list[float]  # per PUB

    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        values = sorted(self.latencies_us) or [0.0]

        def rank(q: float) -> float:
            return values[min(len(values) - 1, int(q * len(values)))]

        return f"(us: p50 {rank(0.5):.0f}, p99 {rank(0.99):.0f}, p99.9 {rank(0.999):.0f}, max {values[-1]:.0f})"


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"  V2")
    return sock


def _subscribe(port: int, topic: str, channel: str) -> tuple[socket.socket, bytearray]:
    sock = _connect(port)
    buf = bytearray()
    sock.sendall(f"SUB {topic} {channel}\n".encode())
    _frame_type, data = read_frame(sock, buf)
    if data != b"OK":
        raise RuntimeError(f"SUB failed: {data!r}")
    sock.sendall(b"RDY 1\n")
    return sock, buf


def _frames(buf: bytearray) -> list[tuple[int, bytes]]:
    """Complete frames at the front of ``buf`` (removed from it)."""
    out = []
    pos = 0
    while len(buf) - pos >= 8:
        size, frame_type = II.unpack_from(buf, pos)
        if len(buf) - pos < 4 + size:
            break
        out.append((frame_type, bytes(buf[pos + 8: pos + 4 + size])))
        pos += 4 + size
    del buf[:pos]
    return out


def _run_workers(jobs: list[tuple[Callable[..., None], tuple]]) -> list[tuple[int, float, list[float]]]:
    """Start one process per job, each given the result queue, a ready queue and the start event before its own
    args; once each in turn is connected (consumers listed first subscribe before a producer starts), start them
    together and collect (count, seconds, latencies) from each."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    ready = ctx.Queue()
    go = ctx.Event()
    procs = [ctx.Process(target=target, args=(results, ready, go, *args), daemon=True) for target, args in jobs]
    try:
        for proc in procs:
            proc.start()
            error = ready.get(timeout=60)
            if error:
                raise RuntimeError(error)
        go.set()
        return [results.get(timeout=900) for _ in procs]
    finally:
        go.set()
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()


def _merge(collected: list[tuple[int, float, list[float]]]) -> Outcome:
    latencies: list[float] = []
    for _count, _seconds, lat in collected:
        latencies.extend(lat)
    seconds = max(seconds for _count, seconds, _lat in collected)
    return Outcome(sum(count for count, _seconds, _lat in collected), seconds, latencies)


def _spread(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts) if total // parts or i < total]


# ---- single PUBs ---------------------------------------------------------------------------------------------

def _pub_worker(results, ready, go, port: int, connections: int, seconds: float, topics: tuple[str, ...]) -> None:
    commands = [f"PUB {topic}\n".encode() + struct.pack(">i", len(_BODY)) + _BODY for topic in topics]
    turn = 0
    try:
        socks = [_connect(port) for _ in range(connections)]
    except OSError as err:
        ready.put(str(err))
        return
    ready.put("")
    go.wait()
    sel = selectors.DefaultSelector()
    sent_at: dict[int, float] = {}
    for sock in socks:
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, bytearray())
    latencies: list[float] = []
    now = time.perf_counter
    start = now()
    end = start + seconds
    for sock in socks:
        sent_at[sock.fileno()] = now()
        sock.send(commands[turn % len(commands)])
        turn += 1
    done = 0
    while now() < end:
        for key, _ in sel.select(timeout=1):
            sock = key.fileobj
            buf = key.data
            buf += sock.recv(65536)  # type: ignore[union-attr]
            while len(buf) >= len(_OK):
                if buf[:len(_OK)] != _OK:
                    raise RuntimeError(f"not OK: {bytes(buf[:64])!r}")
                del buf[:len(_OK)]
                t = now()
                latencies.append((t - sent_at[sock.fileno()]) * 1e6)  # type: ignore[union-attr]
                done += 1
                sent_at[sock.fileno()] = t  # type: ignore[union-attr]
                sock.send(commands[turn % len(commands)])  # type: ignore[union-attr]
                turn += 1
    elapsed = now() - start
    for sock in socks:
        sock.close()
    results.put((done, elapsed, latencies))


def pub_loop(port: int, connections: int, seconds: float, procs: int = 2,
             topics: tuple[str, ...] = ("pub_bench",)) -> Outcome:
    """``topics``: each connection's PUBs go round robin over them (one topic: all to it)."""
    return _merge(_run_workers([(_pub_worker, (port, n, seconds, topics)) for n in _spread(connections, procs)]))


# ---- consumers at RDY 1 --------------------------------------------------------------------------------------

def _subscribed(ready, port: int, connections: int, topic: str, channel: str) -> selectors.BaseSelector | None:
    """``connections`` subscriptions at RDY 1 in one selector (None, with the error on ``ready``, on failure)."""
    try:
        subs = [_subscribe(port, topic, channel) for _ in range(connections)]
    except (OSError, RuntimeError) as err:
        ready.put(str(err))
        return None
    sel = selectors.DefaultSelector()
    for sock, buf in subs:
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, buf)
    ready.put("")
    return sel


def _settle(sel: selectors.BaseSelector, on_message: Callable[[bytes, int], None]) -> None:
    """Read what arrived: ``on_message(frame, receipt time in ns)``, then FIN, for each message; NOP each heartbeat."""
    for key, _ in sel.select(timeout=1):
        sock = key.fileobj
        buf = key.data
        buf += sock.recv(65536)  # type: ignore[union-attr]
        received = time.time_ns()
        for frame_type, data in _frames(buf):
            if frame_type == _FRAME_MESSAGE:
                on_message(data, received)
                sock.send(b"FIN " + data[10:26] + b"\n")  # type: ignore[union-attr]
            elif data == _HEARTBEAT:
                sock.send(b"NOP\n")  # type: ignore[union-attr]


def _close_all(sel: selectors.BaseSelector) -> None:
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    sel.close()


def _consume_worker(results, ready, go, port: int, connections: int, seconds: float, topic: str,
                    channel: str) -> None:
    sel = _subscribed(ready, port, connections, topic, channel)
    if sel is None:
        return
    go.wait()
    done: list[int] = []
    now = time.perf_counter
    start = now()
    end = start + seconds
    while now() < end:
        _settle(sel, lambda _data, received: done.append(received))
    elapsed = now() - start
    _close_all(sel)
    results.put((len(done), elapsed, []))


def rdy1_consume(port: int, connections: int, seconds: float, procs: int = 2, topic: str = "sub_bench",
                 channel: str = "ch") -> Outcome:
    jobs = [(_consume_worker, (port, n, seconds, topic, channel)) for n in _spread(connections, procs)]
    return _merge(_run_workers(jobs))
