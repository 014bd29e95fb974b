"""DiskQueue against data dirs written by the real Go nsqd v1.3.0 (go-diskqueue v1.1.0), checked record by record."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from nsqd_py.core.disk.queue import DiskQueue
from tests.support import go_fixture
from tests.unit.test_disk_queue import CapturingLogger, go_read

MAX_BYTES = 65536  # --max-bytes-per-file of every fixture
MIN_SIZE = 26
MAX_SIZE = 26 + 1024 * 1024  # default --max-msg-size

def load(name: str, tmp_path: Path) -> dict:
    """Copy a fixture data dir (minus MANIFEST.json) to tmp_path, check it is intact, return its manifest."""
    src = go_fixture(name)
    manifest = json.loads((src / "MANIFEST.json").read_text())
    for entry in manifest["files"]:
        shutil.copyfile(src / entry["name"], tmp_path / entry["name"])
        assert hashlib.sha256((tmp_path / entry["name"]).read_bytes()).hexdigest() == entry["sha256"], entry["name"]
    return manifest


def open_queue(tmp_path: Path, name: str, log: CapturingLogger | None = None) -> DiskQueue:
    return DiskQueue(name, str(tmp_path), MAX_BYTES, MIN_SIZE, MAX_SIZE, 2500, 2 * 10**9, log or CapturingLogger())


def read_all(q: DiskQueue) -> list[tuple[bytes, object]]:
    out = []
    while (item := q.read_one()) is not None:
        out.append(item)
    return out


def decode(data: bytes) -> tuple[int, str, bytes]:
    """(attempts, id, body) of an nsqd message record."""
    return int.from_bytes(data[8:10], "big"), data[10:26].decode(), data[26:]


def manifest_records(manifest: dict, queue: str) -> list[tuple[int, dict]]:
    """(file number, record) for every record the meta file says is unread, in disk order."""
    files = {f["name"]: f for f in manifest["files"]}
    depth, read, _ = files[f"{queue}.diskqueue.meta.dat"]["content"].split("\n", 2)
    rfile, rpos = map(int, read.split(","))
    out = []
    for num in range(rfile, 1000):
        entry = files.get(f"{queue}.diskqueue.{num:06d}.dat")
        if entry is None:
            break
        out += [(num, r) for r in entry["records"] if num > rfile or r["offset"] >= rpos]
    assert len(out) == int(depth)
    return out


def test_clean_shutdown_dir(tmp_path: Path) -> None:
    manifest = load("go-datadir-clean", tmp_path)
    raw_topic = manifest["topics"]["raw"]
    log = CapturingLogger()
    for queue, depth in [("raw", 300), ("orders:audit", 123), ("orders:billing", 103), ("frozen", 7),
                         ("orders", 0), ("frozen:c", 0)]:
        q = open_queue(tmp_path, queue, log)
        assert q.depth() == depth, queue
        items = read_all(q)
        expected = manifest_records(manifest, queue) if depth else []
        assert len(items) == len(expected) == depth
        # where each record handed out starts, in read order (none is acked yet)
        positions = list(zip(q._pending_files, q._pending_pos, strict=True))
        for (data, _), position, (file_num, record) in zip(items, positions, expected, strict=True):
            assert position == (file_num, record["offset"])
            assert len(data) == record["len"]
            attempts, msg_id, body = decode(data)
            assert (attempts, msg_id) == (record["attempts"], record["id"])
            if "publish_index" in record:
                index = record["publish_index"]
                assert len(body) == raw_topic["body_sizes_in_publish_order"][index]
                assert hashlib.sha256(body).hexdigest() == raw_topic["body_sha256_in_publish_order"][index]
            else:
                assert body.decode() == record["body"]
        if queue in ("orders:audit", "orders:billing"):
            # after a restart Go delivered in disk order, each attempts count one higher than on disk
            seen = manifest["topics"]["orders"]["channels"][queue.split(":")[1]]["observed_delivery_order"]
            assert [(o["body"], o["id"], o["attempts"]) for o in seen] == \
                [(decode(d)[2].decode(), decode(d)[1], decode(d)[0] + 1) for d, _ in items]
        if queue == "raw":
            order = [r["publish_index"] for _, r in expected]
            assert order == raw_topic["observed_delivery_order_as_publish_index"]
        for _, token in items:
            q.ack(token)
        q.close()
        assert go_read(tmp_path, queue, MAX_BYTES) == (0, [])
    assert "ERROR" not in log.text and "WARNING" not in log.text
    assert sorted(p.name for p in tmp_path.glob("*.dat") if ".diskqueue.0" in p.name) == [  # the write files
        "frozen.diskqueue.000000.dat", "orders:audit.diskqueue.000000.dat", "orders:billing.diskqueue.000000.dat",
        "raw.diskqueue.000011.dat"]
    assert (tmp_path / "raw.diskqueue.meta.dat").read_text() == "0\n11,62445\n11,62445\n"
    assert (tmp_path / "orders:audit.diskqueue.meta.dat").read_text() == "0\n0,4960\n0,4960\n"


def test_clean_dir_unacked_reads_stay_for_go(tmp_path: Path) -> None:
    """Half-read, unacked: Go starting on our data dir would find every record again."""
    manifest = load("go-datadir-clean", tmp_path)
    q = open_queue(tmp_path, "raw")
    items = read_all(q)
    for _, token in items[:100]:
        q.ack(token)
    q.close()
    depth, records = go_read(tmp_path, "raw", MAX_BYTES)
    assert depth == 200
    assert records == [d for d, _ in items[100:]]
    assert manifest_records(manifest, "raw")[100][0] == 3  # files 0..2 hold records 0..74
    assert not (tmp_path / "raw.diskqueue.000002.dat").exists()
    assert (tmp_path / "raw.diskqueue.000003.dat").exists()


def test_sigkill_dir(tmp_path: Path) -> None:
    manifest = load("go-datadir-crash", tmp_path)
    topic = open_queue(tmp_path, "events")
    assert topic.depth() == 0 and topic.read_one() is None
    sink = open_queue(tmp_path, "events:sink")
    assert sink.depth() == 400
    bodies = [decode(d)[2].decode() for d, _ in read_all(sink)]
    assert bodies == [f"ev-{i:05d}" for i in range(100, 500)]  # exactly the 400 un-FINed, once, in order
    acked = set(manifest["acknowledged_by_pub"]["bodies"]) - set(manifest["finished_before_kill"]["bodies"])
    assert set(bodies) == acked
    assert len(bodies) == manifest["go_after_restart"]["delivered_count"]


def test_sigkill_stale_meta_dir(tmp_path: Path) -> None:
    manifest = load("go-datadir-crash-stale-meta", tmp_path)
    log = CapturingLogger()
    topic = open_queue(tmp_path, "events", log)
    sink = open_queue(tmp_path, "events:sink", log)
    for queue in ("events", "events:sink"):
        assert (f"WARNING: DISKQUEUE({queue}) {tmp_path}/{queue}.diskqueue.000000.dat metadata writePos 9500 < file "
                f"size of 19000, skipping to new file") in log.text
    # Go's meta depths (0 and 250) were stale; we count what the salvage will read
    assert (topic.depth(), sink.depth()) == (250, 500)
    from_topic = [decode(d)[2].decode() for d, _ in read_all(topic)]
    from_sink = [decode(d)[2].decode() for d, _ in read_all(sink)]
    assert from_topic == [f"ev-{i:05d}" for i in range(250, 500)]
    assert from_sink == [f"ev-{i:05d}" for i in range(500)]
    delivered = from_sink + from_topic  # the topic's records go to the sink channel, as Go did
    assert delivered == manifest["go_after_restart"]["delivered_order"]
    finished = set(manifest["finished_before_kill"])
    assert {f"ev-{i:05d}" for i in range(500)} - finished <= set(delivered)
    assert "negative depth" not in log.text
    sink.put(b"\0" * 26 + b"after")  # writing continues in a new file
    assert [decode(d)[2] for d, _ in read_all(sink)] == [b"after"]
    topic.close()
    sink.close()
    assert (tmp_path / "events:sink.diskqueue.000001.dat").exists()
