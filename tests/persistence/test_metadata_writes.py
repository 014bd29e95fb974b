"""nsqd.dat by group commit, on the real process: every create, pause and delete that was answered survives
kill -9, and creates from many connections at once share writes."""

from __future__ import annotations

import json
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from tests.support import FRAME_RESPONSE, RawConn


def _create(url: str, topic: str) -> None:
    with requests.Session() as session:
        assert session.post(f"{url}/topic/create?topic={topic}", timeout=30).status_code == 200
        for channel in ("a", "b"):
            assert session.post(f"{url}/channel/create?topic={topic}&channel={channel}", timeout=30).status_code == 200


def test_creates_from_many_connections_share_writes_and_survive_kill_9(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "d"
    proc = nsqd_factory(data_path=data)
    url = f"http://127.0.0.1:{proc.http_port}"
    topics = [f"t{i}" for i in range(60)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda t: _create(url, t), topics))
    assert requests.post(f"{url}/channel/pause?topic=t3&channel=b", timeout=30).status_code == 200
    assert requests.post(f"{url}/topic/pause?topic=t4", timeout=30).status_code == 200
    assert requests.post(f"{url}/topic/delete?topic=t5", timeout=30).status_code == 200
    conn = RawConn(proc.tcp_port)  # a SUB to a new topic and channel answers after their write, too
    conn.identify()
    conn.sub("by_sub", "c")
    writes = proc.log().count("persisting topic/channel metadata")
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGKILL)
    proc.proc.wait()
    conn.close()

    meta = json.loads((data / "nsqd.dat").read_text())
    found = {t["name"]: t for t in meta["topics"]}
    assert sorted(found) == sorted([*(t for t in topics if t != "t5"), "by_sub"])
    assert all([c["name"] for c in found[t]["channels"]] == ["a", "b"] for t in found if t != "by_sub")
    assert found["t3"]["channels"][1] == {"name": "b", "paused": True}
    assert found["t4"]["paused"] is True
    assert found["by_sub"]["channels"] == [{"name": "c", "paused": False}]
    changes = len(topics) * 3 + 4  # creates, the pauses, the delete, the SUB's topic+channel (one write each)
    print(f"{changes} changes, {writes} writes")
    assert writes < changes  # one at start-up, then shared rounds

    restarted = nsqd_factory(data_path=data)
    stats = {t["topic_name"]: t for t in restarted.stats()["topics"]}
    assert sorted(stats) == sorted(found)
    assert stats["t4"]["paused"] is True


def test_a_publish_to_a_new_topic_answers_after_its_write(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "d"
    proc = nsqd_factory(data_path=data)
    conn = RawConn(proc.tcp_port)
    for i in range(20):
        conn.send(f"PUB p{i}", b"x")
        assert conn.frame() == (FRAME_RESPONSE, b"OK")
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGKILL)
    proc.proc.wait()
    conn.close()
    meta = json.loads((data / "nsqd.dat").read_text())
    assert sorted(t["name"] for t in meta["topics"]) == sorted(f"p{i}" for i in range(20))
