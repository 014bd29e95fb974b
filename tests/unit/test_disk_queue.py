"""DiskQueue: go-diskqueue's file format and rules, acknowledged reads, syncing. Real files in tmp_path."""

from __future__ import annotations

import io
import os
import stat
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import gevent
import pytest

from nsqd_py.core.disk.ephemeral import DummyBackend
from nsqd_py.core.disk.queue import DiskQueue
from nsqd_py.core.errors import BackendError
from nsqd_py.runtime.log import DEBUG, Logger

MIN_SIZE = 26
MAX_SIZE = 26 + 1024 * 1024
HOUR_NS = 3600 * 10**9


class CapturingLogger(Logger):
    """A Logger whose lines stay in memory for assertions."""

    def __init__(self) -> None:
        super().__init__(level=DEBUG, stream=io.StringIO())

    @property
    def text(self) -> str:
        return self.stream.getvalue()


def make_queue(path: Path, name: str = "t", max_bytes: int = 1024, sync_every: int = 2500,
               sync_timeout_ns: int = HOUR_NS, before_sync: Callable[[], None] | None = None,
               logger: Logger | None = None) -> DiskQueue:
    return DiskQueue(name, str(path), max_bytes, MIN_SIZE, MAX_SIZE, sync_every, sync_timeout_ns,
                     logger or CapturingLogger(), before_sync=before_sync)


def rec(i: int, size: int = 40) -> bytes:
    """A record body of ``size`` bytes that names ``i``."""
    return f"rec-{i:06d}-".encode().ljust(size, b".")


def drain(q: DiskQueue, ack: bool = True) -> list[bytes]:
    out = []
    while (item := q.read_one()) is not None:
        out.append(item[0])
        if ack:
            q.ack(item[1])
    return out


def meta(path: Path, name: str = "t") -> str:
    return (path / f"{name}.diskqueue.meta.dat").read_text()


def meta_becomes(path: Path, expected: str, timeout: float = 5.0) -> str:
    """The meta file once a timer-driven sync wrote ``expected`` (or what it held at the timeout)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        meta_file = path / "t.diskqueue.meta.dat"
        text = meta_file.read_text() if meta_file.exists() else ""
        if text == expected:
            break
        gevent.sleep(0.02)
    return text


def data_files(path: Path, name: str = "t") -> list[str]:
    return sorted(p.name for p in path.glob(f"{name}.diskqueue.0*.dat"))


def settle(q: DiskQueue) -> None:
    """Let a background sync (started by sync_every or an ack) finish."""
    while q._background is not None:
        q._background.join()


def abandon(q: DiskQueue) -> None:
    """Simulate kill -9: no sync, no meta write; only let go of the descriptors and the timer."""
    if q._timer is not None:
        q._timer.kill(block=False)
    for fd in (q._rfd, q._wfd, *q._old_wfds):
        if fd is not None:
            os.close(fd)
    q._rfd = q._wfd = None
    q._old_wfds = []
    q._closed = True


def go_read(path: Path, name: str, max_bytes: int) -> tuple[int, list[bytes]]:
    """An independent reader that follows go-diskqueue v1.1.0's rules; returns (meta depth, records).

    It asserts that Go would hit no read error: our files must never make Go rename a file to .bad.
    """
    text = (path / f"{name}.diskqueue.meta.dat").read_text()
    depth_s, read_s, write_s, tail = text.split("\n")
    assert tail == ""
    depth = int(depth_s)
    rfile, rpos = map(int, read_s.split(","))
    wfile, wpos = map(int, write_s.split(","))
    wname = path / f"{name}.diskqueue.{wfile:06d}.dat"
    if wname.exists() and wpos < wname.stat().st_size:  # Go's unclean-stop rule
        wfile, wpos = wfile + 1, 0
    records = []
    while rfile < wfile or rpos < wpos:
        fname = path / f"{name}.diskqueue.{rfile:06d}.dat"
        raw = fname.read_bytes()
        max_read = len(raw) if rfile < wfile else max_bytes
        assert rpos + 4 <= len(raw), f"Go would hit EOF at {rpos} of {fname.name}"
        (size,) = struct.unpack_from(">i", raw, rpos)
        assert MIN_SIZE <= size <= MAX_SIZE, f"Go would reject size {size} at {rpos} of {fname.name}"
        assert rpos + 4 + size <= len(raw), f"Go would hit a short read at {rpos} of {fname.name}"
        records.append(raw[rpos + 4:rpos + 4 + size])
        rpos += 4 + size
        if rfile < wfile and rpos >= max_read:
            rfile, rpos = rfile + 1, 0
    return depth, records


# ---- format ---------------------------------------------------------------------------------------------


def test_round_trip_and_depth(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    bodies = [rec(i, 26 + i) for i in range(50)]
    for body in bodies:
        q.put(body)
    assert q.depth() == 50
    first = q.read_one()
    assert first is not None and first[0] == bodies[0]
    assert q.depth() == 49  # depth counts unread records only, like Go's
    q.ack(first[1])
    assert drain(q) == bodies[1:]
    assert q.depth() == 0
    assert q.read_one() is None
    q.close()


def test_meta_bytes_match_go(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=100 * 1024 * 1024)
    for i in range(9):
        q.put(rec(i, 29 if i < 8 else 28))  # 8 * 33 + 32 = 296 bytes
    q.close()
    assert meta(tmp_path) == "9\n0,0\n0,296\n"
    assert (tmp_path / "t.diskqueue.000000.dat").stat().st_size == 296


def test_fresh_queue_close_writes_empty_meta(tmp_path: Path) -> None:
    make_queue(tmp_path, name="orders:audit").close()
    assert meta(tmp_path, "orders:audit") == "0\n0,0\n0,0\n"
    assert sorted(os.listdir(tmp_path)) == ["orders:audit.diskqueue.meta.dat"]


def test_file_names_modes_and_record_layout(tmp_path: Path) -> None:
    q = make_queue(tmp_path, name="orders:billing")
    q.put(b"y" * 27)
    q.close()
    assert sorted(os.listdir(tmp_path)) == ["orders:billing.diskqueue.000000.dat", "orders:billing.diskqueue.meta.dat"]
    for entry in tmp_path.iterdir():
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600, entry.name
    assert (tmp_path / "orders:billing.diskqueue.000000.dat").read_bytes() == b"\x00\x00\x00\x1b" + b"y" * 27


def test_rollover_at_exact_byte_boundary(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=100)
    q.put(rec(0, 46))  # 50 bytes
    q.put(rec(1, 46))  # writePos + 50 == 100: still fits
    q.put(rec(2, 46))  # would pass 100: next file
    q.put(rec(3, 200))  # bigger than a file: written anyway, at the start of one
    q.put(rec(4, 26))
    q.close()
    sizes = {name: (tmp_path / name).stat().st_size for name in data_files(tmp_path)}
    assert sizes == {"t.diskqueue.000000.dat": 100, "t.diskqueue.000001.dat": 50, "t.diskqueue.000002.dat": 204,
                     "t.diskqueue.000003.dat": 30}
    assert meta(tmp_path) == "5\n0,0\n3,30\n"
    assert drain(make_queue(tmp_path, max_bytes=100)) == [rec(0, 46), rec(1, 46), rec(2, 46), rec(3, 200), rec(4, 26)]


def test_invalid_sizes_rejected(tmp_path: Path) -> None:
    q = DiskQueue("t", str(tmp_path), 1024, MIN_SIZE, 100, 2500, HOUR_NS, CapturingLogger())
    with pytest.raises(BackendError, match="invalid message write size"):
        q.put(b"x" * 25)
    with pytest.raises(BackendError):
        q.put(b"x" * 101)
    q.put(b"x" * 100)
    assert q.depth() == 1
    q.close()
    assert meta(tmp_path) == "1\n0,0\n0,104\n"


def test_reads_follow_writes_across_files(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=200)
    got = []
    for i in range(60):
        q.put(rec(i, 26 + i % 40))
        if i % 3 == 2:
            got += drain(q)
    got += drain(q)
    assert got == [rec(i, 26 + i % 40) for i in range(60)]
    q.close()
    assert not list(tmp_path.glob("*.bad"))


def test_reader_caught_up_when_writer_rolls(tmp_path: Path) -> None:
    """go-diskqueue#42: Go renames a fully read file to .bad here; we move the reader along instead."""
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=100, logger=log)
    q.put(rec(0, 60))
    assert drain(q) == [rec(0, 60)]
    q.put(rec(1, 60))  # rolls while the reader sits at the end of file 0
    assert drain(q) == [rec(1, 60)]
    q.close()
    assert "ERROR" not in log.text
    assert not list(tmp_path.glob("*.bad"))
    assert data_files(tmp_path) == ["t.diskqueue.000001.dat"]
    assert meta(tmp_path) == "0\n1,64\n1,64\n"


def test_resume_writing_after_reopen(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=150)
    for i in range(5):
        q.put(rec(i))
    q.close()
    q = make_queue(tmp_path, max_bytes=150)
    for i in range(5, 10):
        q.put(rec(i))
    assert q.depth() == 10
    assert drain(q) == [rec(i) for i in range(10)]
    q.close()


def test_empty_continues_numbering_and_ignores_old_tokens(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=100)
    for i in range(6):
        q.put(rec(i, 46))  # files 0, 1, 2
    old = [q.read_one() for _ in range(3)]
    q.empty()
    assert data_files(tmp_path) == []
    assert meta(tmp_path) == "0\n3,0\n3,0\n"
    assert q.depth() == 0 and q.read_one() is None
    q.put(rec(10, 46))
    q.put(rec(11, 46))
    new = q.read_one()
    assert new is not None and new[0] == rec(10, 46)
    for item in old:
        q.ack(item[1])  # tokens from before empty() change nothing
    q.sync()
    assert meta(tmp_path) == "2\n3,0\n3,100\n"
    q.ack(new[1])
    q.close()
    assert data_files(tmp_path) == ["t.diskqueue.000003.dat"]
    assert meta(tmp_path) == "1\n3,50\n3,100\n"


def test_delete_removes_everything(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=100)
    for i in range(5):
        q.put(rec(i, 46))
    q.sync()
    q.read_one()
    q.delete()
    assert os.listdir(tmp_path) == []
    with pytest.raises(BackendError):
        q.put(rec(9))
    assert q.read_one() is None
    q.close()  # harmless after delete
    assert os.listdir(tmp_path) == []


def test_put_after_close_fails(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.close()
    with pytest.raises(BackendError, match="exiting"):
        q.put(rec(0))
    with pytest.raises(BackendError):
        q.empty()


def test_write_error_raises_and_leaves_no_garbage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = make_queue(tmp_path)
    q.put(rec(0))
    real_pwrite = os.pwrite

    def half_then_fail(fd: int, data: bytes, offset: int) -> int:
        if len(data) < 40:
            raise OSError(28, "No space left on device")
        return real_pwrite(fd, data[:20], offset)

    monkeypatch.setattr(os, "pwrite", half_then_fail)
    with pytest.raises(BackendError, match="No space left"):
        q.put(rec(1))
    monkeypatch.undo()
    q.put(rec(2))
    assert drain(q) == [rec(0), rec(2)]
    q.close()
    assert (tmp_path / "t.diskqueue.000000.dat").stat().st_size == 88


def test_put_many_writes_once_per_file_and_rolls_between_records(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An MPUB past the memory queue: one write per data file, never a record split across two files, the files
    what one put per record leaves."""
    writes: list[int] = []
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: (writes.append(len(data)), real_pwrite(fd, data,
                                                                                                        offset))[1])
    q = make_queue(tmp_path, max_bytes=200)  # 44 bytes a record: a fifth would take a file past its 200
    q.put_many([rec(i) for i in range(10)])
    assert writes == [4 * 44, 4 * 44, 2 * 44]
    assert q.depth() == 10
    q.close()
    (tmp_path / "b").mkdir()
    one_by_one = make_queue(tmp_path / "b", max_bytes=200)
    for i in range(10):
        one_by_one.put(rec(i))
    one_by_one.close()
    for name in ("t.diskqueue.000000.dat", "t.diskqueue.000001.dat", "t.diskqueue.000002.dat"):
        assert (tmp_path / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert drain(make_queue(tmp_path, max_bytes=200)) == [rec(i) for i in range(10)]


def test_a_failed_put_many_takes_none_of_its_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = make_queue(tmp_path)
    q.put(rec(0))
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(BackendError, match="Input/output error"):
        q.put_many([rec(1), rec(2), rec(3)])
    monkeypatch.undo()
    assert q.depth() == 1
    q.put_many([rec(4), rec(5)])
    assert drain(q) == [rec(0), rec(4), rec(5)]


def test_a_put_many_refused_for_a_size_keeps_and_syncs_the_records_before_it(tmp_path: Path) -> None:
    q = make_queue(tmp_path, sync_every=1)
    with pytest.raises(BackendError, match="invalid message write size"):
        q.put_many([rec(0), b"x" * (MAX_SIZE + 1), rec(1)])
    assert q.depth() == 1
    assert meta(tmp_path) == "1\n0,0\n0,44\n"  # synced before the refusal, as a put of it alone would be
    assert drain(q) == [rec(0)]


def test_dummy_backend() -> None:
    b = DummyBackend()
    b.put(b"x" * 30)
    b.put_many([b"x" * 30, b"y" * 30])
    assert b.depth() == 0
    assert b.read_one() is None
    b.ack(object())
    b.sync()
    b.empty()
    b.close()
    b.delete()


# ---- acknowledged reads ---------------------------------------------------------------------------------


def test_out_of_order_acks_then_reopen_returns_unacked(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=1000)
    for i in range(20):
        q.put(rec(i))
    items = [q.read_one() for _ in range(10)]
    for i in (3, 1, 4, 0, 2):  # out of order, but together they are the prefix 0..4
        q.ack(items[i][1])
    q.close()
    assert meta(tmp_path) == "15\n0,220\n0,880\n"
    q = make_queue(tmp_path, max_bytes=1000)
    assert q.depth() == 15
    assert drain(q) == [rec(i) for i in range(5, 20)]  # exactly the 5 unacked and the 10 unread
    q.close()


def test_acked_behind_an_unacked_record_come_back_too(tmp_path: Path) -> None:
    """The meta file can only name one read position: at-least-once, never at-most-once."""
    q = make_queue(tmp_path)
    for i in range(10):
        q.put(rec(i))
    items = [q.read_one() for _ in range(10)]
    for i in (0, 1, 5, 6, 9):
        q.ack(items[i][1])
    q.close()
    assert meta(tmp_path) == "8\n0,88\n0,440\n"
    assert drain(make_queue(tmp_path)) == [rec(i) for i in range(2, 10)]


def test_repeated_and_foreign_acks_are_ignored(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    other = make_queue(tmp_path, name="other")
    for i in range(3):
        q.put(rec(i))
        other.put(rec(i))
    a = q.read_one()
    q.read_one()
    other.read_one()
    foreign = other.read_one()  # same sequence number as q's second, still unacked, record
    q.ack(a[1])
    q.ack(a[1])
    q.ack(foreign[1])
    q.ack(object())
    q.close()
    other.close()
    assert meta(tmp_path) == "2\n0,44\n0,132\n"


def test_files_kept_until_persisted_position_passes(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=100)
    for i in range(6):
        q.put(rec(i, 46))  # two records per file: files 0, 1, 2
    items = [q.read_one() for _ in range(5)]
    assert q._rfile == 2
    for item in items[1:]:
        q.ack(item[1])
    q.sync()
    assert data_files(tmp_path) == ["t.diskqueue.000000.dat", "t.diskqueue.000001.dat", "t.diskqueue.000002.dat"]
    assert meta(tmp_path) == "6\n0,0\n2,100\n"
    q.ack(items[0][1])  # the persisted position jumps to the unread record in file 2: a sync removes 0 and 1
    settle(q)
    assert data_files(tmp_path) == ["t.diskqueue.000002.dat"]
    assert meta(tmp_path) == "1\n2,50\n2,100\n"
    q.close()


@pytest.mark.parametrize("acks_synced", [False, True])
def test_crash_loses_nothing_put_and_not_acked(tmp_path: Path, acks_synced: bool) -> None:
    q = make_queue(tmp_path, max_bytes=300, sync_every=1)
    for i in range(50):
        q.put(rec(i))
    items = [q.read_one() for _ in range(30)]
    acked = set()
    for i in [*range(0, 12), 20, 25, 14, 13, 29]:
        q.ack(items[i][1])
        acked.add(i)
    if acks_synced:
        settle(q)
    abandon(q)
    q = make_queue(tmp_path, max_bytes=300, sync_every=1)
    got = drain(q)
    expected = [rec(i) for i in range(50) if i not in acked]
    assert set(expected) <= set(got)
    # with the acks on disk the prefix 0..11 is gone; without, everything comes back (at-least-once)
    assert got == [rec(i) for i in range(12 if acks_synced else 0, 50)]
    q.close()


def test_crash_without_any_meta_sync_salvages_everything(tmp_path: Path) -> None:
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=300, sync_every=10_000)
    for i in range(30):
        q.put(rec(i))
    abandon(q)
    q = make_queue(tmp_path, max_bytes=300, logger=log)
    assert q.depth() == 30
    assert drain(q) == [rec(i) for i in range(30)]
    assert "WARNING" in log.text


def test_crash_with_torn_last_record(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=10_000, sync_every=1)
    for i in range(10):
        q.put(rec(i))
    abandon(q)
    with open(tmp_path / "t.diskqueue.000000.dat", "ab") as f:
        f.write(b"\x00\x00\x00\x28half a record")  # a write cut short by the crash
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=10_000, logger=log)
    assert q.depth() == 10
    assert drain(q) == [rec(i) for i in range(10)]
    q.put(rec(10))
    assert drain(q) == [rec(10)]
    q.close()
    assert "unexpected EOF" in log.text
    assert (tmp_path / "t.diskqueue.000000.dat.bad").exists()
    assert data_files(tmp_path) == ["t.diskqueue.000001.dat"]


# ---- what Go reads from our files -------------------------------------------------------------------------


def test_go_reads_what_we_wrote(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=500)
    bodies = [rec(i, 26 + (i * 7) % 90) for i in range(120)]
    for body in bodies[:80]:
        q.put(body)
    items = [q.read_one() for _ in range(50)]
    for item in items[:30]:
        q.ack(item[1])
    for item in items[31:45]:
        q.ack(item[1])  # record 30 stays unacked: Go must redeliver from it
    for body in bodies[80:]:
        q.put(body)
    q.close()
    depth, records = go_read(tmp_path, "t", 500)
    assert records == bodies[30:]
    assert depth == len(records)


def test_go_reads_after_salvage_and_rewrite(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=300, sync_every=10_000)
    for i in range(20):
        q.put(rec(i))
    abandon(q)
    (tmp_path / "t.diskqueue.meta.dat").unlink(missing_ok=True)
    q = make_queue(tmp_path, max_bytes=300)
    for i in range(20, 25):
        q.put(rec(i))
    for _ in range(3):
        item = q.read_one()
        q.ack(item[1])
    q.close()
    depth, records = go_read(tmp_path, "t", 300)
    assert records == [rec(i) for i in range(3, 25)]
    assert depth == 22


# ---- syncing ----------------------------------------------------------------------------------------------


def test_sync_every_counts_puts_and_acks(tmp_path: Path) -> None:
    q = make_queue(tmp_path, sync_every=3)
    q.put(rec(0))
    q.put(rec(1))
    assert not (tmp_path / "t.diskqueue.meta.dat").exists()
    q.put(rec(2))  # the sync runs in the background: the publisher does not wait for it
    assert not (tmp_path / "t.diskqueue.meta.dat").exists()
    settle(q)
    assert meta(tmp_path) == "3\n0,0\n0,132\n"
    item = q.read_one()
    q.ack(item[1])
    q.put(rec(3))
    settle(q)
    assert meta(tmp_path) == "3\n0,0\n0,132\n"
    q.put(rec(4))
    settle(q)
    assert meta(tmp_path) == "4\n0,44\n0,220\n"
    q.close()


def test_sync_every_one_fsyncs_each_put(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    q = make_queue(tmp_path, sync_every=1)
    q.put(rec(0))
    assert q._wfd in synced
    assert meta(tmp_path) == "1\n0,0\n0,44\n"
    q.put(rec(1))
    assert meta(tmp_path) == "2\n0,0\n0,88\n"
    q.close()


def test_sync_timeout_timer(tmp_path: Path) -> None:
    q = make_queue(tmp_path, sync_timeout_ns=50_000_000)
    q.put(rec(0))
    assert not (tmp_path / "t.diskqueue.meta.dat").exists()
    assert meta_becomes(tmp_path, "1\n0,0\n0,44\n") == "1\n0,0\n0,44\n"
    item = q.read_one()
    q.ack(item[1])
    assert meta_becomes(tmp_path, "0\n0,44\n0,44\n") == "0\n0,44\n0,44\n"
    q.close()


def test_before_sync_runs_first_and_sees_a_snapshot(tmp_path: Path) -> None:
    """An ack that lands while before_sync runs is not in that sync's meta (the dependant may lack it)."""
    calls: list[str] = []
    late: list[object] = []

    def before() -> None:
        calls.append(meta(tmp_path) if (tmp_path / "t.diskqueue.meta.dat").exists() else "")
        while late:
            q.ack(late.pop())

    q = make_queue(tmp_path, before_sync=before)
    q.put(rec(0))
    q.put(rec(1))
    q.sync()
    assert calls == [""]
    item = q.read_one()
    late.append(item[1])
    q.put(rec(2))
    q.sync()
    assert calls[-1] == "2\n0,0\n0,88\n"  # before_sync ran before anything of this sync reached the disk
    assert meta(tmp_path) == "3\n0,0\n0,132\n"  # the ack came after the snapshot
    q.sync()
    assert meta(tmp_path) == "2\n0,44\n0,132\n"
    q.close()


def test_sync_without_changes_is_skipped(tmp_path: Path) -> None:
    calls = []
    q = make_queue(tmp_path, before_sync=lambda: calls.append(1))
    q.put(rec(0))
    q.sync()
    q.sync()
    q.read_one()  # handing out changes nothing on disk
    q.sync()
    q.close()
    assert calls == [1]


def test_concurrent_puts_share_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    count = [0]
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        count[0] += 1
        time.sleep(0.005)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    q = make_queue(tmp_path, max_bytes=2000, sync_every=1)

    def publisher(n: int) -> None:
        for i in range(10):
            q.put(rec(n * 100 + i))

    gevent.joinall([gevent.spawn(publisher, n) for n in range(20)], raise_error=True)
    assert q.depth() == 200
    assert count[0] < 100  # group commit: one sync (data + meta fsync) covers many puts
    monkeypatch.undo()
    got = drain(q)
    assert sorted(got) == sorted(rec(n * 100 + i) for n in range(20) for i in range(10))
    q.close()
    assert go_read(tmp_path, "t", 2000) == (0, [])


def test_fsync_does_not_block_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads = set()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        threads.add(threading.get_ident())
        time.sleep(0.1)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    ticks = [0]

    def ticker() -> None:
        while True:
            ticks[0] += 1
            gevent.sleep(0.01)

    g = gevent.spawn(ticker)
    q = make_queue(tmp_path, sync_every=1)
    q.put(rec(0))
    g.kill()
    assert ticks[0] >= 5
    assert threading.get_ident() not in threads
    q.close()


def test_failed_sync_raises_moves_to_a_new_file_and_is_retried(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """After a failed fsync the file's unsynced tail cannot be trusted (fsyncgate): writing goes on in the next
    file; what was written stays readable."""
    log = CapturingLogger()
    q = make_queue(tmp_path, sync_every=1, sync_timeout_ns=50_000_000, logger=log)

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(BackendError, match="Input/output error"):
        q.put(rec(0))
    monkeypatch.undo()
    # the sync-timeout timer retries without another put
    assert meta_becomes(tmp_path, "1\n0,0\n1,0\n") == "1\n0,0\n1,0\n"
    assert "ERROR" not in log.text
    q.put(rec(1))
    assert drain(q) == [rec(0), rec(1)]
    assert (tmp_path / "t.diskqueue.000001.dat").stat().st_size == 4 + len(rec(1))
    q.close()
