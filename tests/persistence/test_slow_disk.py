"""A slow disk (issue 39): every fsync of one topic's data file takes seconds (`strace --inject=...:delay_exit`), at
`--mem-queue-size=0 --sync-every=1`, where publishers wait for their fsync.

Its publishers wait, and nobody else does: publishes to other topics are answered, their consumers get the messages
and heartbeats arrive meanwhile; nsqd logs the slow sync; and a publisher that sends faster than the disk syncs is
held back by TCP instead of filling nsqd's memory.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import psutil
import pytest

from tests.persistence.straced import StracedNsqd, needs_strace
from tests.support import FRAME_RESPONSE, RawConn, wait_until

pytestmark = [pytest.mark.process, needs_strace]

DURABLE = ("--mem-queue-size=0", "--sync-every=1")
#: how long each sync of the slow file takes; long enough that nothing else can be mistaken for waiting on it
SLOW_SYNC_MICROSECONDS = 4_000_000


def _slow_nsqd(data: Path, *flags: str) -> StracedNsqd:
    return StracedNsqd(data, "fsync,fdatasync", data / "slow.diskqueue.000000.dat",
                       f"delay_exit={SLOW_SYNC_MICROSECONDS}", *DURABLE, *flags)


def _answered(conn: RawConn) -> bool:
    """Whether an answer is waiting on ``conn``, without waiting for one."""
    conn.sock.setblocking(False)
    try:
        return bool(conn.sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
    finally:
        conn.sock.settimeout(10)


def test_a_slow_queue_holds_up_only_its_own_publishers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with _slow_nsqd(data) as nsqd:
        consumer = nsqd.connect()
        consumer.identify(heartbeat_interval=1000)
        assert consumer.sub("fast", "c") == (FRAME_RESPONSE, b"OK")
        consumer.send("RDY 100")
        slow = nsqd.connect(timeout=30)
        slow.send("PUB slow", b"waits for its fsync")
        wait_until(lambda: "slow" in {t["topic_name"] for t in nsqd.stats()["topics"]})
        fast = nsqd.connect()
        bodies = [b"fast %02d" % i for i in range(20)]
        for body in bodies:
            fast.send("PUB fast", body)
            assert fast.frame() == (FRAME_RESPONSE, b"OK")
        assert [consumer.message().body for _ in bodies] == bodies
        assert not _answered(slow), "the slow topic's publish was answered before its fsync could have returned"
        assert consumer.frame(skip_heartbeats=False) == (FRAME_RESPONSE, b"_heartbeat_")
        assert slow.frame() == (FRAME_RESPONSE, b"OK")
        wait_until(lambda: "DISKQUEUE(slow): a sync took" in nsqd.log())


def test_a_publisher_faster_than_the_disk_is_held_back_by_tcp(tmp_path: Path) -> None:
    """It pipelines 1 KiB PUBs without reading its answers. nsqd takes a command only when the one before is
    answered (Go's rule), so what it accepts is what the socket buffers hold, and its memory stays put."""
    data = tmp_path / "data"
    data.mkdir()
    with _slow_nsqd(data) as nsqd:
        warm = nsqd.connect(timeout=30)
        warm.send("PUB slow", b"first")
        assert warm.frame() == (FRAME_RESPONSE, b"OK")  # the topic, its file and the first slow sync are done
        assert nsqd.process is not None
        server = psutil.Process(nsqd.process.pid)
        processes = [server, *server.children(recursive=True)]
        before = sum(p.memory_info().rss for p in processes)
        pub = b"PUB slow\n" + struct.pack(">i", 1024) + b"x" * 1024
        flood = socket.create_connection(("127.0.0.1", nsqd.tcp_port))
        flood.sendall(b"  V2")
        flood.setblocking(False)
        offered, sent, stuck_since = 100 * 1024 * 1024, 0, None
        while sent < offered:
            try:
                sent += flood.send(pub * 64)
                stuck_since = None
            except BlockingIOError:
                stuck_since = stuck_since or time.monotonic()
                if time.monotonic() - stuck_since > 2:
                    break  # nsqd stopped reading
                time.sleep(0.01)
        grown = sum(p.memory_info().rss for p in processes) - before
        flood.close()
        assert sent < offered / 4, f"nsqd read {sent >> 20} MiB of PUBs it could not answer"
        assert grown < 64 << 20, f"nsqd grew by {grown >> 20} MiB"
