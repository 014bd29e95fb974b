"""At --mem-queue-size=0 --sync-every=1 no OK leaves before the fsync that covers its message (issue 22).

A kill -9 test cannot show this (the page cache survives a killed process), so these tests run nsqd in-process
and record, in one list and in the order they happen: every write to a data file (which bodies it holds), every
fsync as it returns, and every acknowledgement as it is handed to the socket (TCP) or returned by the app (HTTP).
Each message must then have been written to every queue it goes to, and each of those writes covered by an fsync
of the same file that returned, before its OK.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import gevent
import pytest

from nsqd_py.client.protocol import mpub_body
from tests.inprocess import InProcessFactory, InProcessNsqd
from tests.support import FRAME_RESPONSE, RawConn, wait_until

DURABLE = {"mem_queue_size": 0, "sync_every": 1}
_DATA_FILE = re.compile(r"\.diskqueue\.\d+\.dat$")


@dataclass
class Recorder:
    """Events in the order they happened: ("write", path, data), ("fsynced", path), ("ok", who, index)."""

    events: list[tuple] = field(default_factory=list)

    def ok_index(self, who: str, index: int) -> int:
        return self.events.index(("ok", who, index))

    def check_covered(self, bodies: list[bytes], ok_at: int, files: int) -> None:
        """Every body was written to ``files`` data files, each write followed by an fsync of its file, all
        before event ``ok_at``."""
        for body in bodies:
            writes = [(i, e[1]) for i, e in enumerate(self.events) if e[0] == "write" and body in e[2]]
            assert len({path for _, path in writes}) == files, (body, writes)
            for at, path in writes:
                assert at < ok_at, f"{body!r} written to {path} only after its OK"
                synced = [i for i, e in enumerate(self.events[:ok_at]) if i > at and e == ("fsynced", path)]
                assert synced, f"OK for {body!r} sent before any fsync of {path} after its write"


def _path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    rec = Recorder()
    real_pwrite, real_fsync, real_fdatasync = os.pwrite, os.fsync, os.fdatasync

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        path = _path(fd)
        written = real_pwrite(fd, data, offset)
        if _DATA_FILE.search(path):
            rec.events.append(("write", path, bytes(data[:written])))
        return written

    def synced(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            path = _path(fd)
            real(fd)
            rec.events.append(("fsynced", path))  # appended as it returns (in the pool's thread)
        return sync

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "fsync", synced(real_fsync))
    monkeypatch.setattr(os, "fdatasync", synced(real_fdatasync))
    yield rec


def _recorded_conn(proc: InProcessNsqd, rec: Recorder, who: str) -> RawConn:
    """A connection whose server side records each response frame it sends, as it hands the bytes to the socket
    (every send passes through the connection's encoder, the identity without compression)."""
    before = set(proc.tcp.connections)
    conn = proc.connect()
    new = wait_until(lambda: set(proc.tcp.connections) - before, what="the server's side of the connection")
    client = proc.tcp.connections[new.pop()]
    encode = client._encode
    answered = [0]

    def recording_encode(data: bytes) -> bytes:
        if data.endswith(b"\x00\x00\x00\x00OK"):  # a response frame "OK" (the last frame of this write)
            rec.events.append(("ok", who, answered[0]))
            answered[0] += 1
        return encode(data)

    client._encode = recording_encode
    return conn


def _setup(proc: InProcessNsqd, topics: list[str]) -> None:
    for topic in topics:
        assert proc.request("POST", f"/topic/create?topic={topic}").status == 200
        for channel in ("a", "b"):  # every message goes to two channel queues; both must be synced
            assert proc.request("POST", f"/channel/create?topic={topic}&channel={channel}").status == 200


def test_tcp_pub_mpub_dpub_ok_only_after_fsync(inproc_factory: InProcessFactory, recorder: Recorder) -> None:
    proc = inproc_factory(**DURABLE)
    topics = ["order_t0", "order_t1"]
    _setup(proc, topics)
    sent: dict[str, list[list[bytes]]] = {}

    def producer(who: str, topic: str, conn: RawConn) -> None:
        batches = sent.setdefault(who, [])
        for i in range(6):
            bodies = [f"<{who}-{i}-{j}>".encode() for j in range(1 if i % 3 != 1 else 50)]
            if i % 3 == 0:
                conn.send(f"PUB {topic}", bodies[0])
            elif i % 3 == 1:
                conn.send(f"MPUB {topic}", mpub_body(bodies))
            else:
                conn.send(f"DPUB {topic} 1000", bodies[0])
            batches.append(bodies)
            assert conn.frame() == (FRAME_RESPONSE, b"OK")
        conn.close()

    conns = [_recorded_conn(proc, recorder, f"p{n}") for n in range(6)]  # one by one: each is told apart
    producers = [gevent.spawn(producer, f"p{n}", topics[n % 2], conn) for n, conn in enumerate(conns)]
    gevent.joinall(producers, raise_error=True)
    for who, batches in sent.items():
        for index, bodies in enumerate(batches):
            recorder.check_covered(bodies, recorder.ok_index(who, index), files=2)


def test_http_pub_and_mpub_answer_only_after_fsync(inproc_factory: InProcessFactory, recorder: Recorder) -> None:
    proc = inproc_factory(**DURABLE)
    _setup(proc, ["order_http"])
    sent: dict[str, list[list[bytes]]] = {}

    def producer(who: str) -> None:
        batches = sent.setdefault(who, [])
        for i in range(6):
            if i % 2:
                bodies = [f"<{who}-{i}-{j}>".encode() for j in range(20)]
                reply = proc.request("POST", "/mpub?topic=order_http", b"\n".join(bodies))
            else:
                bodies = [f"<{who}-{i}>".encode()]
                reply = proc.request("POST", "/pub?topic=order_http", bodies[0])
            recorder.events.append(("ok", who, i))  # the app returned: the answer goes out now
            assert (reply.status, reply.body) == (200, b"OK")
            batches.append(bodies)

    gevent.joinall([gevent.spawn(producer, f"h{n}") for n in range(4)], raise_error=True)
    for who, batches in sent.items():
        for index, bodies in enumerate(batches):
            recorder.check_covered(bodies, recorder.ok_index(who, index), files=2)


def test_an_mpub_costs_one_sync_per_queue_not_one_per_message(inproc_factory: InProcessFactory,
                                                              recorder: Recorder) -> None:
    proc = inproc_factory(**DURABLE)
    _setup(proc, ["order_mpub"])
    conn = proc.connect()
    conn.send("MPUB order_mpub", mpub_body([b"m%d" % i for i in range(200)]))
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    data_syncs = [e for e in recorder.events if e[0] == "fsynced" and _DATA_FILE.search(e[1])]
    assert 1 <= len(data_syncs) <= 2 * 2, data_syncs  # two queues, at most one extra round each
