"""What it costs to move messages between two processes: the hop an I/O-worker or topic-owner split would add.

    .venv/bin/python bench/bench_ipc.py

Two transports, each between a sender and a receiver process, 200-byte messages with a 4-byte length each:
- a unix stream socket, one ``send`` per batch of frames, the receiver splitting them (``recv_into``);
- a shared-memory ring (multiprocessing.shared_memory, one writer, one reader), its free and used space in two
  counters, an eventfd each way to wake a side that found the ring full or empty.
For each batch size: messages per second one way, and CPU per message of each side (``os.times`` in the
process); then a ping-pong of one message at a time for the round-trip latency. Python on both sides, as a
worker and a broker of ours would be.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import struct
import time
from collections.abc import Callable
from multiprocessing import shared_memory

BODY = b"x" * 200
LEN = struct.Struct(">I")
FRAME = LEN.pack(len(BODY)) + BODY
COUNTERS = struct.Struct("<QQ")  # bytes written, bytes read (monotonic)
RING = 1 << 20
_STOP = b"\xff\xff\xff\xff"  # a length no frame has: the end


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def _split(view: memoryview, start: int, end: int) -> tuple[int, int]:
    """Walk the whole frames in view[start:end]; (messages, where the first incomplete frame starts)."""
    count = 0
    while end - start >= 4:
        size = LEN.unpack_from(view, start)[0]
        if end - start < 4 + size:
            break
        start += 4 + size
        count += 1
    return count, start


def sender(put: Callable[[bytes], object], total: int, batch: int, results: mp.Queue) -> None:
    """Hand ``total`` messages to ``put`` (a socket's sendall, a ring's write) ``batch`` at a time, then the end."""
    payload = FRAME * batch
    cpu = _cpu()
    for _ in range(total // batch):
        put(payload)
    put(_STOP)
    results.put(("sender", _cpu() - cpu))


# ---- unix socket ---------------------------------------------------------------------------------------------


def socket_receiver(sock: socket.socket, results: mp.Queue) -> None:
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    cpu = _cpu()
    start = time.perf_counter()
    have = messages = 0
    while True:
        got = sock.recv_into(view[have:])
        have += got
        count, used = _split(view, 0, have)
        messages += count
        if view[used:have].tobytes() == _STOP:
            break
        buf[: have - used] = buf[used:have]
        have -= used
    results.put(("receiver", _cpu() - cpu, messages, time.perf_counter() - start))


def socket_ping(sock: socket.socket, rounds: int, results: mp.Queue) -> None:
    latencies = []
    for _ in range(rounds):
        start = time.perf_counter()
        sock.sendall(FRAME)
        got = 0
        while got < len(FRAME):
            got += len(sock.recv(65536))
        latencies.append((time.perf_counter() - start) * 1e6)
    sock.sendall(_STOP)
    results.put(("ping", latencies))


def socket_pong(sock: socket.socket) -> None:
    while True:
        data = sock.recv(65536)
        if data == _STOP or not data:
            return
        sock.sendall(data)


# ---- shared-memory ring --------------------------------------------------------------------------------------

class Ring:
    """One writer, one reader; the two counters at the start of the segment, the data after them."""

    def __init__(self) -> None:
        self.shm = shared_memory.SharedMemory(create=True, size=COUNTERS.size + RING)
        self.buf = self.shm.buf
        self.data = self.buf[COUNTERS.size:]
        self.has_data = os.eventfd(0)
        self.has_room = os.eventfd(0)

    def counters(self) -> tuple[int, int]:
        return COUNTERS.unpack_from(self.buf, 0)

    def write(self, payload: bytes) -> None:
        size = len(payload)
        while True:
            written, read = self.counters()
            if RING - (written - read) >= size:
                break
            os.eventfd_read(self.has_room)
        at = written % RING
        first = min(size, RING - at)
        self.data[at:at + first] = payload[:first]
        self.data[: size - first] = payload[first:]
        struct.pack_into("<Q", self.buf, 0, written + size)
        os.eventfd_write(self.has_data, 1)

    def read_into(self, out: bytearray) -> int:
        """Append what is there to ``out`` (waiting when nothing is); the bytes taken."""
        while True:
            written, read = self.counters()
            if written > read:
                break
            os.eventfd_read(self.has_data)
        size = written - read
        at = read % RING
        first = min(size, RING - at)
        out += self.data[at:at + first]
        out += self.data[: size - first]
        struct.pack_into("<Q", self.buf, 8, read + size)
        os.eventfd_write(self.has_room, 1)
        return size


def ring_receiver(ring: Ring, results: mp.Queue) -> None:
    pending = bytearray()
    cpu = _cpu()
    start = time.perf_counter()
    messages = 0
    while True:
        ring.read_into(pending)
        view = memoryview(pending)
        count, used = _split(view, 0, len(pending))
        messages += count
        done = view[used:].tobytes() == _STOP
        view.release()
        if done:
            break
        del pending[:used]
    results.put(("receiver", _cpu() - cpu, messages, time.perf_counter() - start))


# ---- runs ----------------------------------------------------------------------------------------------------

def one_way(put: Callable[[bytes], object], receiver: Callable[..., None], receiver_args: tuple, total: int,
            batch: int) -> tuple[float, float, float]:
    """(messages/s, sender CPU us per message, receiver CPU us per message)."""
    results: mp.Queue = mp.Queue()
    procs = [mp.Process(target=receiver, args=(*receiver_args, results)),
             mp.Process(target=sender, args=(put, total, batch, results))]
    for proc in procs:
        proc.start()
    got = {item[0]: item for item in (results.get(timeout=300) for _ in procs)}
    for proc in procs:
        proc.join()
    _, receiver_cpu, messages, seconds = got["receiver"]
    assert messages == total // batch * batch, (messages, total)
    return messages / seconds, got["sender"][1] / messages * 1e6, receiver_cpu / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    mp.set_start_method("fork")
    print("| transport | batch | messages/s | sender us/msg | receiver us/msg |")
    print("|---|---|---|---|---|")
    for batch in (1, 16, 128):
        total = args.messages * 5 if batch > 1 else args.messages  # os.times() ticks are 10 ms
        for name in ("unix socket", "shared-memory ring"):
            runs = []
            for _ in range(args.rounds):
                if name == "unix socket":
                    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                    runs.append(one_way(left.sendall, socket_receiver, (right,), total, batch))
                    left.close()
                    right.close()
                else:
                    ring = Ring()
                    runs.append(one_way(ring.write, ring_receiver, (ring,), total, batch))
                    ring.data.release()
                    ring.buf.release()
                    ring.shm.close()
                    ring.shm.unlink()
            rate, sent, received = (statistics.median(r[i] for r in runs) for i in range(3))
            print(f"| {name} | {batch} | {rate:,.0f} | {sent:.2f} | {received:.2f} |")
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    results: mp.Queue = mp.Queue()
    pong = mp.Process(target=socket_pong, args=(right,))
    pong.start()
    socket_ping(left, 20_000, results)
    pong.join()
    latencies = results.get()[1]
    cut = statistics.quantiles(latencies, n=100)
    print(f"\nunix socket ping-pong, one 200 B message each way: p50 {cut[49]:.1f} us, p99 {cut[98]:.1f} us")


if __name__ == "__main__":
    main()
