"""DiskQueue startup recovery and bad data: Go's rules (bad files, tail depth) plus our salvage of unsynced data."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.unit.test_disk_queue import CapturingLogger, data_files, drain, go_read, make_queue, meta, rec


def write_files(path: Path, files: dict[int, list[bytes]], name: str = "t") -> None:
    """Data files the way any nsqd version writes them, without going through DiskQueue."""
    for num, records in files.items():
        (path / f"{name}.diskqueue.{num:06d}.dat").write_bytes(b"".join(struct.pack(">i", len(r)) + r for r in records))


def write_meta(path: Path, text: str, name: str = "t") -> None:
    (path / f"{name}.diskqueue.meta.dat").write_text(text)


def test_no_meta_salvages_all_data_files(tmp_path: Path) -> None:
    write_files(tmp_path, {3: [rec(0), rec(1)], 4: [rec(2)], 5: [rec(3), rec(4)]})
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=100, logger=log)
    assert "WARNING: DISKQUEUE(t) no metadata, salvaging data files 000003..000005" in log.text
    assert q.depth() == 5
    q.put(rec(5))
    assert drain(q) == [rec(i) for i in range(6)]
    q.close()
    assert data_files(tmp_path) == ["t.diskqueue.000006.dat"]  # writing continued after the highest file
    assert meta(tmp_path) == "0\n6,44\n6,44\n"


def test_meta_write_pos_behind_file_size_salvages_the_tail(tmp_path: Path) -> None:
    q = make_queue(tmp_path, max_bytes=10_000)
    for i in range(10):
        q.put(rec(i))
    q.close()
    write_meta(tmp_path, "4\n0,0\n0,176\n")  # a meta file from before the last 6 puts
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=10_000, logger=log)
    assert "metadata writePos 176 < file size of 440, skipping to new file" in log.text
    assert "depth recounted after salvage: 4 -> 10" in log.text
    assert q.depth() == 10
    q.put(rec(10))
    assert drain(q) == [rec(i) for i in range(11)]
    q.close()
    assert data_files(tmp_path) == ["t.diskqueue.000001.dat"]


def test_files_after_meta_write_file_are_salvaged(tmp_path: Path) -> None:
    write_files(tmp_path, {0: [rec(0), rec(1)], 1: [rec(2)], 2: [rec(3)]})
    write_meta(tmp_path, "2\n0,0\n0,88\n")  # the rolls to files 1 and 2 never reached the meta file
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=100, logger=log)
    assert "data files after writeFileNum 0 up to 2" in log.text
    assert q.depth() == 4
    assert drain(q) == [rec(i) for i in range(4)]
    q.close()
    assert meta(tmp_path) == "0\n3,0\n3,0\n"


def test_write_file_shorter_than_meta_moves_writing_on(tmp_path: Path) -> None:
    write_files(tmp_path, {0: [rec(0)]})
    write_meta(tmp_path, "2\n0,0\n0,88\n")  # the second record never reached the disk
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=1000, logger=log)
    assert "metadata writePos 88 > file size of 44" in log.text
    q.put(rec(1))  # must not land behind a hole at offset 88
    assert drain(q) == [rec(0), rec(1)]
    q.close()
    assert not list(tmp_path.glob("*.bad"))


def test_bad_record_skips_to_next_file(tmp_path: Path) -> None:
    write_files(tmp_path, {0: [rec(0), rec(1)], 1: [rec(2), rec(3)], 2: [rec(4), rec(5)]})
    raw = bytearray((tmp_path / "t.diskqueue.000001.dat").read_bytes())
    raw[44:48] = struct.pack(">i", 7)  # second record of file 1: a length below the minimum
    (tmp_path / "t.diskqueue.000001.dat").write_bytes(bytes(raw))
    write_meta(tmp_path, "6\n0,0\n2,88\n")
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=100, logger=log)
    assert drain(q) == [rec(0), rec(1), rec(2), rec(4), rec(5)]
    assert "ERROR: DISKQUEUE(t) reading at 44 of" in log.text and "invalid message read size (7)" in log.text
    assert "jump to next file and saving bad file as" in log.text
    assert "positive depth at tail (1), data loss, resetting 0..." in log.text
    assert q.depth() == 0
    q.close()
    assert sorted(p.name for p in tmp_path.glob("*.bad")) == ["t.diskqueue.000001.dat.bad"]
    assert data_files(tmp_path) == ["t.diskqueue.000002.dat"]


def test_bad_write_file_moves_writing_on(tmp_path: Path) -> None:
    write_files(tmp_path, {0: [rec(0), rec(1)]})
    raw = bytearray((tmp_path / "t.diskqueue.000000.dat").read_bytes())
    raw[44:48] = struct.pack(">i", -1)
    (tmp_path / "t.diskqueue.000000.dat").write_bytes(bytes(raw))
    write_meta(tmp_path, "2\n0,0\n0,88\n")
    q = make_queue(tmp_path, max_bytes=1000, logger=CapturingLogger())
    assert drain(q) == [rec(0)]
    q.put(rec(2))  # Go skips the write side too: new records go to a new file
    assert drain(q) == [rec(2)]
    q.close()
    assert data_files(tmp_path) == ["t.diskqueue.000001.dat"]
    assert (tmp_path / "t.diskqueue.000000.dat.bad").exists()


def test_bad_file_keeps_unacked_records_until_acked(tmp_path: Path) -> None:
    write_files(tmp_path, {0: [rec(0), rec(1)], 1: [rec(2)]})
    raw = bytearray((tmp_path / "t.diskqueue.000000.dat").read_bytes())
    raw[44:48] = struct.pack(">i", 10**9)
    (tmp_path / "t.diskqueue.000000.dat").write_bytes(bytes(raw))
    write_meta(tmp_path, "3\n0,0\n1,44\n")
    q = make_queue(tmp_path, max_bytes=100, logger=CapturingLogger())
    first = q.read_one()
    assert first is not None and first[0] == rec(0)
    second = q.read_one()
    assert second is not None and second[0] == rec(2)
    q.ack(second[1])
    q.close()
    assert (tmp_path / "t.diskqueue.000000.dat").exists()  # rec(0) is still unacked in it
    assert meta(tmp_path) == "2\n0,0\n1,44\n"
    q = make_queue(tmp_path, max_bytes=100, logger=CapturingLogger())
    assert drain(q) == [rec(0), rec(2)]  # at-least-once: rec(2) again, it was behind rec(0)
    q.close()
    assert (tmp_path / "t.diskqueue.000000.dat.bad").exists()
    assert not (tmp_path / "t.diskqueue.000000.dat").exists()


def test_missing_file_in_the_middle(tmp_path: Path) -> None:
    write_files(tmp_path, {0: [rec(0)], 2: [rec(2)]})
    write_meta(tmp_path, "3\n0,0\n2,44\n")
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=40, logger=log)
    assert drain(q) == [rec(0), rec(2)]
    assert "t.diskqueue.000001.dat - [Errno 2]" in log.text
    assert "positive depth at tail (1)" in log.text
    q.close()
    assert meta(tmp_path) == "0\n2,44\n2,44\n"
    assert not list(tmp_path.glob("*.bad"))


def test_read_position_beyond_write_position(tmp_path: Path) -> None:
    write_files(tmp_path, {2: [rec(0)]})
    write_meta(tmp_path, "3\n2,100\n2,44\n")
    log = CapturingLogger()
    q = make_queue(tmp_path, logger=log)
    assert "read position 2,100 > write position 2,44" in log.text
    assert q.depth() == 0 and q.read_one() is None
    q.put(rec(1))
    q.close()
    assert data_files(tmp_path) == ["t.diskqueue.000003.dat"]  # like Go: the next writeFileNum
    assert meta(tmp_path) == "1\n3,0\n3,44\n"


def test_depth_reset_at_tail(tmp_path: Path) -> None:
    write_files(tmp_path, {0: [rec(0)]})
    write_meta(tmp_path, "5\n0,44\n0,44\n")
    log = CapturingLogger()
    q = make_queue(tmp_path, logger=log)
    assert q.depth() == 0
    assert "ERROR: DISKQUEUE(t) positive depth at tail (5), data loss, resetting 0..." in log.text
    q.close()
    assert meta(tmp_path) == "0\n0,44\n0,44\n"
    write_meta(tmp_path, "-2\n0,44\n0,44\n")
    log = CapturingLogger()
    make_queue(tmp_path, logger=log).close()
    assert "negative depth at tail (-2), metadata corruption, resetting 0..." in log.text


def test_unparseable_meta_salvages_from_files(tmp_path: Path) -> None:
    write_files(tmp_path, {0: [rec(0), rec(1)]})
    write_meta(tmp_path, "garbage")
    log = CapturingLogger()
    q = make_queue(tmp_path, logger=log)
    assert "failed to retrieveMetaData" in log.text
    assert drain(q) == [rec(0), rec(1)]
    q.close()


def test_old_oversized_files_are_read_to_their_real_size(tmp_path: Path) -> None:
    """nsq <= 1.2.1 (go-diskqueue v1.0.0) rolled after passing the limit, so files can exceed it."""
    write_files(tmp_path, {0: [rec(i, 46) for i in range(3)], 1: [rec(i, 46) for i in range(3, 6)]})
    write_meta(tmp_path, "6\n0,0\n1,150\n")
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=100, logger=log)
    q.put(rec(6, 46))  # 150 + 50 > 100: a new file
    assert drain(q) == [rec(i, 46) for i in range(7)]
    q.close()
    assert "ERROR" not in log.text and "WARNING" not in log.text
    assert data_files(tmp_path) == ["t.diskqueue.000002.dat"]


def test_go_meta_at_end_of_finished_file(tmp_path: Path) -> None:
    """Go can leave readPos at the end of a finished file (go-diskqueue#42); we just move on."""
    write_files(tmp_path, {0: [rec(0)], 1: [rec(1)]})
    write_meta(tmp_path, "1\n0,44\n1,44\n")
    log = CapturingLogger()
    q = make_queue(tmp_path, max_bytes=60, logger=log)
    assert drain(q) == [rec(1)]
    q.close()
    assert "ERROR" not in log.text
    assert not list(tmp_path.glob("*.bad"))
    assert data_files(tmp_path) == ["t.diskqueue.000001.dat"]


def test_go_reads_our_recovered_state(tmp_path: Path) -> None:
    write_files(tmp_path, {0: [rec(0), rec(1)], 1: [rec(2), rec(3)]})
    write_meta(tmp_path, "1\n0,0\n0,44\n")  # stale: Go itself would skip to file 1 writes; we count 4 records
    q = make_queue(tmp_path, max_bytes=100)
    item = q.read_one()
    q.ack(item[1])
    q.put(rec(4))
    q.close()
    depth, records = go_read(tmp_path, "t", 100)
    assert records == [rec(i) for i in range(1, 5)]
    assert depth == 4
