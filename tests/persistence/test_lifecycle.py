"""Graceful shutdown flushes everything, kill -9 loses nothing acknowledged, and start-up checks."""

from __future__ import annotations

import itertools
import json
import signal
import struct
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from nsqd_py.client.protocol import mpub_body
from tests.support import (
    FRAME_RESPONSE,
    NSQD_BIN,
    NsqdProcess,
    RawConn,
    drain,
    wait_until,
)


def publish(port: int, topic: str, bodies: list[bytes]) -> None:
    conn = RawConn(port)
    for start in range(0, len(bodies), 100):
        conn.send(f"MPUB {topic}", mpub_body(bodies[start : start + 100]))
        assert conn.frame() == (FRAME_RESPONSE, b"OK")
    conn.close()


def test_sigterm_flushes_memory_in_flight_and_deferred(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "d"
    proc = nsqd_factory(data_path=data)
    bodies = [f"m{i:03d}".encode() for i in range(300)]
    consumer = RawConn(proc.tcp_port)
    consumer.identify()
    consumer.sub("flush", "c")
    publish(proc.tcp_port, "flush", bodies)
    consumer.send("RDY 20")
    taken = [consumer.message() for _ in range(20)]
    consumer.send("RDY 0")
    for msg in taken[:5]:
        consumer.send(b"FIN " + msg.id)
    for msg in taken[5:10]:
        consumer.send(b"REQ " + msg.id + b" 600000")  # deferred for 10 minutes
    consumer.send("NOP")
    wait_until(lambda: proc.stats()["topics"][0]["channels"][0]["deferred_count"] == 5)
    publish(proc.tcp_port, "flush_no_channel", bodies[:50])
    assert proc.stop() == 0
    consumer.close()
    log = proc.log()
    assert "CHANNEL(c): flushing" in log and "in-flight" in log and "NSQ: bye" in log

    proc2 = nsqd_factory(data_path=data)
    topics = {t["topic_name"]: t for t in proc2.stats()["topics"]}
    assert topics["flush"]["channels"][0]["depth"] == 295
    assert topics["flush_no_channel"]["depth"] == 50
    msgs = drain(proc2.tcp_port, "flush", "c")
    finished = {m.body for m in taken[:5]}
    assert Counter(m.body for m in msgs) == Counter(b for b in bodies if b not in finished)
    in_flight = {m.body for m in taken[10:]}
    assert all(m.attempts == 2 for m in msgs if m.body in in_flight), "attempts are kept on disk"


def test_kill_9_loses_nothing_acknowledged_with_sync_every_1(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "d"
    flags = ("--mem-queue-size=0", "--sync-every=1", "--max-bytes-per-file=8192")
    proc = nsqd_factory(*flags, data_path=data)
    consumer = RawConn(proc.tcp_port)
    consumer.identify()
    consumer.sub("durable", "c")
    sent: list[bytes] = []
    pub = RawConn(proc.tcp_port)
    for i in range(100):
        body = f"pub-{i:03d}".encode()
        pub.send("PUB durable", body)
        assert pub.frame() == (FRAME_RESPONSE, b"OK")
        sent.append(body)
    batch = [f"mpub-{i:03d}".encode() for i in range(100)]
    pub.send("MPUB durable", mpub_body(batch))
    assert pub.frame() == (FRAME_RESPONSE, b"OK")
    sent += batch
    pub.send("DPUB durable 100", b"dpub-0")
    assert pub.frame() == (FRAME_RESPONSE, b"OK")
    sent.append(b"dpub-0")
    consumer.send("RDY 80")
    received = [consumer.message() for _ in range(80)]
    consumer.send("RDY 0")
    finished = {m.body for m in received[:40]}
    for msg in received[:40]:
        consumer.send(b"FIN " + msg.id)
    consumer.send("NOP")
    wait_until(lambda: proc.stats()["topics"][0]["channels"][0]["in_flight_count"] == 40)
    proc.stop(sig=signal.SIGKILL)

    proc2 = nsqd_factory(*flags, data_path=data)
    back = Counter(m.body for m in drain(proc2.tcp_port, "durable", "c"))
    missing = [b for b in sent if b not in finished and b not in back]
    assert not missing, f"lost {len(missing)} acknowledged messages, e.g. {missing[:5]}"
    duplicates = sum(n - 1 for n in back.values()) + len(finished & set(back))
    print(f"kill -9: {len(sent) - len(finished)} expected back, {duplicates} duplicates")


def test_second_nsqd_on_same_data_path_exits_1(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "d"
    nsqd_factory(data_path=data)
    second = NsqdProcess(data)
    result = subprocess.run(second.args(), capture_output=True, text=True, timeout=20)
    assert result.returncode == 1
    assert f"FATAL: failed to instantiate nsqd - failed to lock data-path: cannot flock directory {data}" \
        in result.stderr
    assert "(possibly in use by another instance of nsqd)" in result.stderr


@pytest.mark.process
def test_missing_data_path_is_fatal(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = subprocess.run([str(NSQD_BIN), f"--data-path={missing}", "--tcp-address=127.0.0.1:0",
                             "--http-address=127.0.0.1:0"], capture_output=True, text=True, timeout=20)
    assert result.returncode == 1
    assert f"failed to lock data-path: open {missing}: no such file or directory" in result.stderr


@pytest.mark.process
def test_bad_metadata_is_fatal(tmp_path: Path) -> None:
    (tmp_path / "nsqd.dat").write_text("{not json")
    proc = NsqdProcess(tmp_path)
    result = subprocess.run(proc.args(), capture_output=True, text=True, timeout=20)
    assert result.returncode == 1
    assert "FATAL: failed to instantiate nsqd - failed to parse metadata in" in result.stderr


def test_metadata_with_invalid_names_is_skipped_and_pause_restored(nsqd_factory, tmp_path: Path) -> None:
    meta = {"topics": [{"name": "bad!name", "paused": False, "channels": None},
                       {"name": "good", "paused": True,
                        "channels": [{"name": "bad chan", "paused": False}, {"name": "c1", "paused": True}]}],
            "version": "1.3.0"}
    data = tmp_path / "d"
    data.mkdir()
    (data / "nsqd.dat").write_text(json.dumps(meta))
    proc = nsqd_factory(data_path=data)
    topics = proc.stats()["topics"]
    assert [t["topic_name"] for t in topics] == ["good"]
    assert topics[0]["paused"] is True
    assert [(c["channel_name"], c["paused"]) for c in topics[0]["channels"]] == [("c1", True)]
    assert "skipping creation of invalid topic bad!name" in proc.log()
    assert "skipping creation of invalid channel bad chan" in proc.log()


def test_metadata_is_written_on_create_and_never_lists_ephemeral(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "d"
    proc = nsqd_factory(data_path=data)
    publish(proc.tcp_port, "kept", [b"x"])
    publish(proc.tcp_port, "gone#ephemeral", [b"x"])
    meta = json.loads((data / "nsqd.dat").read_text())
    assert meta["version"] == "1.3.0"
    assert [t["name"] for t in meta["topics"]] == ["kept"]
    assert not any(p.name.startswith("gone") for p in data.iterdir())


def test_second_sigterm_during_flush_still_flushes(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "d"
    proc = nsqd_factory("--mem-queue-size=200000", data_path=data)
    bodies = [b"x" * 100] * 100_000
    conn = RawConn(proc.tcp_port)
    conn.identify()
    conn.sub("big", "c")
    conn.close()
    publish(proc.tcp_port, "big", bodies)
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.stop() == 0
    proc2 = nsqd_factory(data_path=data)
    assert proc2.stats()["topics"][0]["channels"][0]["depth"] == 100_000


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [0.7, 1.9])
def test_kill_9_under_load_loses_nothing_acknowledged(nsqd_factory, tmp_path: Path, kill_after: float) -> None:
    """Publishers and a consumer run flat out; kill -9 lands wherever it lands. Every body whose PUB or
    MPUB got OK and that was not FINed must come back after the restart."""
    data = tmp_path / "d"
    flags = ("--mem-queue-size=0", "--sync-every=1", "--max-bytes-per-file=65536")
    proc = nsqd_factory(*flags, data_path=data)
    acknowledged: list[bytes] = []
    finished: set[bytes] = set()
    stop = threading.Event()

    def publish() -> None:
        try:
            conn = RawConn(proc.tcp_port)
            for i in itertools.count():
                if stop.is_set():
                    return
                if i % 2:
                    body = f"pub-{i}".encode()
                    conn.send("PUB load", body)
                    batch = [body]
                else:
                    batch = [f"mpub-{i}-{j}".encode() for j in range(20)]
                    conn.send("MPUB load", mpub_body(batch))
                if conn.frame() != (FRAME_RESPONSE, b"OK"):
                    return
                acknowledged.extend(batch)
        except (OSError, ConnectionError, struct.error):
            return

    def consume() -> None:
        try:
            conn = RawConn(proc.tcp_port)
            conn.identify()
            conn.sub("load", "c")
            conn.send("RDY 50")
            while not stop.is_set():
                msg = conn.message()
                conn.send(b"FIN " + msg.id)
                finished.add(msg.body)  # counted as FINed only once the FIN is on its way
        except (OSError, ConnectionError, struct.error, AssertionError):
            return

    threads = [threading.Thread(target=publish), threading.Thread(target=consume)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(acknowledged) > 100, timeout=30)  # the load got going (fsync-bound on a slow disk)
    time.sleep(kill_after)
    proc.stop(sig=signal.SIGKILL)
    stop.set()
    for thread in threads:
        thread.join(10)

    proc2 = nsqd_factory(*flags, data_path=data)
    back = {m.body for m in drain(proc2.tcp_port, "load", "c", idle=1.5)}
    missing = [b for b in acknowledged if b not in finished and b not in back]
    assert not missing, f"lost {len(missing)} of {len(acknowledged)} acknowledged messages, e.g. {missing[:5]}"
