"""Every I/O call of the durable path fails once (SQLite's method, issue 39), injected into the real nsqd with
`strace --inject` (Debian's strace; `make strace-deps`), at `--mem-queue-size=0 --sync-every=1`.

After each fault: no OK for a message that is not on disk (the publish the fault hit is refused with nsqd's error
naming the cause), /ping says NOK while it lasts, no traceback, publishing works again once it cleared, and a
restart reads back every acknowledged message. The calls: a message's write, its fdatasync, the full fsync of a new
file, opening the next data file at rollover, the meta file's temporary file (write, fsync, rename), the directory
fsync (at start), nsqd.dat's temporary file (strace attached to a running nsqd), and a consumer's read of a data
file. (strace's -P matches a rename by its source: the temporary files have fixed names for that.)
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from nsqd_py.testing import ServerError
from tests.persistence.straced import AttachedStrace, StracedNsqd, needs_strace
from tests.support import (
    FRAME_RESPONSE,
    NsqdProcess,
    RawConn,
    channel_stats,
    drain,
    request,
    wait_until,
)

pytestmark = [pytest.mark.process, needs_strace]

DURABLE = ("--mem-queue-size=0", "--sync-every=1")
EIO = "Input/output error"
ENOSPC = "No space left on device"


@dataclass
class Fault:
    name: str
    calls: str
    #: the file (in the data dir) the calls must concern; "" for the data dir itself
    file: str
    error: str
    errno_text: str
    when: str = "3"
    flags: tuple[str, ...] = ()


PUBLISH_FAULTS = [
    Fault("write EIO", "pwrite64", "t.diskqueue.000000.dat", "EIO", EIO),
    Fault("write ENOSPC", "pwrite64", "t.diskqueue.000000.dat", "ENOSPC", ENOSPC),
    Fault("fdatasync", "fdatasync", "t.diskqueue.000000.dat", "EIO", EIO),
    Fault("fsync of a new file", "fsync", "t.diskqueue.000000.dat", "EIO", EIO, when="1"),
    Fault("opening the next file", "openat", "t.diskqueue.000001.dat", "EIO", EIO, when="1",
          flags=("--max-bytes-per-file=100",)),
    Fault("opening the next file, ENOSPC", "openat", "t.diskqueue.000001.dat", "ENOSPC", ENOSPC, when="1",
          flags=("--max-bytes-per-file=100",)),
    # the meta file, written by a new file's first (full) sync: its temporary file's write, fsync and rename
    Fault("meta write", "write", "t.diskqueue.meta.dat.tmp", "EIO", EIO, when="1"),
    Fault("meta write, ENOSPC", "write", "t.diskqueue.meta.dat.tmp", "ENOSPC", ENOSPC, when="1"),
    Fault("meta fsync", "fsync", "t.diskqueue.meta.dat.tmp", "EIO", EIO, when="1"),
    Fault("meta rename", "rename,renameat,renameat2", "t.diskqueue.meta.dat.tmp", "EIO", EIO, when="1"),
]


def _publish(conn: RawConn, body: bytes) -> tuple[int, bytes] | None:
    """PUB to topic t and its answer; None when the connection ended without one."""
    return _publish_to(conn, "t", body)


def _publish_to(conn: RawConn, topic: str, body: bytes) -> tuple[int, bytes] | None:
    conn.send(f"PUB {topic}", body)
    try:
        return conn.frame()
    except ConnectionError:
        return None


def _restart_and_read(data: Path, topic: str) -> set[bytes]:
    with NsqdProcess(data) as plain:
        return {m.body for m in drain(plain.tcp_port, topic, "check")}


@pytest.mark.parametrize("fault", PUBLISH_FAULTS, ids=lambda f: f.name)
def test_a_failed_call_refuses_its_publish_and_loses_nothing_acknowledged(fault: Fault, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    nsqd = StracedNsqd(data, fault.calls, data / fault.file, f"error={fault.error}:when={fault.when}", *DURABLE,
                       *fault.flags)
    nsqd.start()
    try:
        acknowledged: list[bytes] = []
        refusals: list[bytes] = []
        health: list[bytes] = []
        conn = nsqd.connect()
        for i in range(12):
            body = b"message %02d" % i
            reply = _publish(conn, body)
            if reply == (FRAME_RESPONSE, b"OK"):
                acknowledged.append(body)
                continue
            refusals.append(b"" if reply is None else reply[1])
            health.append(request(nsqd.http_port, "GET", "/ping").body)
            conn.close()
            conn = nsqd.connect()
        conn.close()
        assert refusals, "the injected fault was never hit"
        assert all(r.startswith(b"E_PUB_FAILED") and fault.errno_text.encode() in r for r in refusals), refusals
        assert all(h.startswith(b"NOK - ") and fault.errno_text.encode() in h for h in health), health
        assert acknowledged[-1] == b"message 11", "publishing did not work again after the fault"
        wait_until(lambda: request(nsqd.http_port, "GET", "/ping").body == b"OK", timeout=15)
        assert nsqd.stop() == 0
        log = nsqd.log()
        assert "Traceback" not in log
        assert fault.errno_text in log
    finally:
        nsqd.stop()
    got = _restart_and_read(data, "t")
    assert set(acknowledged) <= got, f"lost: {sorted(set(acknowledged) - got)}"


def test_a_failed_directory_fsync_at_start_stops_nsqd_with_its_reason(tmp_path: Path) -> None:
    """The directory fsync after nsqd.dat's rename (its first is start-up's; strace counts calls per thread, so a
    later one in a disk thread cannot be singled out): nsqd refuses to start, with nsqd's FATAL line."""
    data = tmp_path / "data"
    data.mkdir()
    nsqd = StracedNsqd(data, "fsync", data, "error=EIO:when=1", *DURABLE)
    with pytest.raises(ServerError, match=f"FATAL: failed to instantiate nsqd - failed to persist metadata - .*{EIO}"):
        nsqd.start()
    assert "Traceback" not in nsqd.log()


def test_a_failed_read_moves_the_file_to_bad_and_the_queue_goes_on(tmp_path: Path) -> None:
    """go-diskqueue's rule: a data file that cannot be read is skipped and kept as `.bad`, with the reason logged;
    what is published after it is delivered."""
    data = tmp_path / "data"
    data.mkdir()
    nsqd = StracedNsqd(data, "pread64", data / "t:c.diskqueue.000000.dat", "error=EIO:when=1", *DURABLE,
                       "--max-bytes-per-file=200")
    nsqd.start()
    try:
        assert request(nsqd.http_port, "POST", "/topic/create?topic=t").status == 200
        assert request(nsqd.http_port, "POST", "/channel/create?topic=t&channel=c").status == 200
        producer = nsqd.connect()
        for i in range(6):
            assert _publish(producer, b"message %02d" % i) == (FRAME_RESPONSE, b"OK")
        got = [m.body for m in drain(nsqd.tcp_port, "t", "c")]
        assert got, "nothing after the bad file was delivered"
        log = nsqd.log()
        assert "jump to next file and saving bad file" in log and EIO in log
        # the drain's connection must be gone first, or "after" may go out to it as it closes
        wait_until(lambda: channel_stats(nsqd, "t", "c")["client_count"] == 0)
        assert _publish(producer, b"after") == (FRAME_RESPONSE, b"OK")
        assert [m.body for m in drain(nsqd.tcp_port, "t", "c")] == [b"after"]
        wait_until(lambda: (data / "t:c.diskqueue.000000.dat.bad").exists())
        assert nsqd.stop() == 0
        assert "Traceback" not in nsqd.log()
    finally:
        nsqd.stop()


def test_after_a_failed_fsync_nothing_written_before_it_is_trusted(tmp_path: Path) -> None:
    """fsyncgate: a failed fsync may have dropped the pages it could not write, and a later fsync that succeeds says
    nothing about them. So the publish it hit is refused and writing moves on to a new data file: when a machine
    crash then leaves a hole where the refused messages were (simulated by zeroing them after kill -9), the reader
    sets the rest of that file aside as .bad, and it holds nothing acknowledged."""
    data = tmp_path / "data"
    data.mkdir()
    first_file = data / "t.diskqueue.000000.dat"
    nsqd = StracedNsqd(data, "fdatasync", first_file, "error=EIO:when=2", *DURABLE)
    nsqd.start()
    try:
        conn = nsqd.connect()
        replies = [_publish(conn, b"message %02d" % i) for i in range(3)]
        assert replies[2] is not None and replies[2][1].startswith(b"E_PUB_FAILED"), replies
        conn = nsqd.connect()
        later = [b"later %02d" % i for i in range(5)]
        assert all(_publish(conn, body) == (FRAME_RESPONSE, b"OK") for body in later)
        assert (data / "t.diskqueue.000001.dat").exists(), "writing stayed in the file whose fsync failed"
        nsqd.stop(sig=signal.SIGKILL)
    finally:
        nsqd.stop()
    acknowledged = [b"message %02d" % i for i, reply in enumerate(replies) if reply == (FRAME_RESPONSE, b"OK")]
    assert acknowledged == [b"message 00", b"message 01"]
    record = 4 + 26 + len(b"message 00")
    kept = len(acknowledged) * record
    with first_file.open("r+b") as dropped:
        dropped.seek(kept)
        dropped.write(bytes(first_file.stat().st_size - kept))
    got = _restart_and_read(data, "t")
    assert set(acknowledged + later) <= got, f"lost: {sorted(set(acknowledged + later) - got)}"


@pytest.mark.parametrize("calls", ["write", "fsync", "rename,renameat,renameat2"])
def test_a_failed_nsqd_dat_write_refuses_what_it_would_record(calls: str, tmp_path: Path) -> None:
    """nsqd.dat's temporary file cannot be written, synced or renamed while strace is attached: a PUB to a new topic
    is refused (a restart would not know the topic, so its messages must not be acknowledged), so is an HTTP create,
    and /ping says NOK. Once the fault clears, the next write lands within seconds and everything works; a crash
    then loses nothing acknowledged. Go nsqd only logs such a failure and answers OK."""
    data = tmp_path / "data"
    data.mkdir()
    nsqd = NsqdProcess(data, *DURABLE)
    nsqd.start()
    try:
        assert nsqd.process is not None
        with AttachedStrace(nsqd.process.pid, calls, data / "nsqd.dat.tmp", "EIO"):
            reply = _publish_to(nsqd.connect(), "new", b"refused")
            assert reply is not None and reply[1].startswith(b"E_PUB_FAILED PUB failed failed to persist metadata - ")
            assert EIO.encode() in reply[1]
            assert request(nsqd.http_port, "POST", "/topic/create?topic=other").status == 500
            assert request(nsqd.http_port, "GET", "/ping").body.startswith(b"NOK - ")
            nsqd.stop(sig=signal.SIGKILL)  # a crash while the fault lasts: nothing was acknowledged in "new"
        nsqd.start()
        assert _publish_to(nsqd.connect(), "new", b"kept") == (FRAME_RESPONSE, b"OK")
        assert nsqd.process is not None
        with AttachedStrace(nsqd.process.pid, calls, data / "nsqd.dat.tmp", "EIO"):
            assert request(nsqd.http_port, "POST", "/topic/create?topic=other").status == 500
        wait_until(lambda: request(nsqd.http_port, "GET", "/ping").body == b"OK", timeout=15)
        assert _publish_to(nsqd.connect(), "other", b"after") == (FRAME_RESPONSE, b"OK")
        nsqd.stop(sig=signal.SIGKILL)
        assert "Traceback" not in nsqd.log()
    finally:
        nsqd.stop()
    with NsqdProcess(data) as plain:
        assert [m.body for m in drain(plain.tcp_port, "new", "check")] == [b"kept"]
        assert [m.body for m in drain(plain.tcp_port, "other", "check")] == [b"after"]

