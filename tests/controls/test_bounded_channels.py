"""Bounded channels (beyond nsqd, issue 45 item 1) and the settings home they live in (issue 49 item 6), against
the real nsqd process: flags, POST/GET /topic/settings and /channel/settings, nsqd.dat, /stats, /metrics."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest

from nsqd_py.config import queue_settings
from tests.support import GO_NSQD, NSQD_BIN, GoNsqd, NsqdProcess, channel_stats, unique, wait_until

FRAME_ERROR = 1
pytestmark = pytest.mark.process


def _post(nsqd: NsqdProcess, target: str) -> tuple[int, dict]:
    reply = nsqd.request("POST", target)
    return reply.status, reply.json()


def _channel(nsqd: NsqdProcess, topic: str, channel: str = "c") -> None:
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel={channel}").status == 200


def _publish(nsqd: NsqdProcess, topic: str, body: bytes) -> int:
    return nsqd.request("POST", f"/pub?topic={topic}", body).status


def _mpub(conn, topic: str, bodies: list[bytes]) -> tuple[int, bytes]:
    payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    conn.send(f"MPUB {topic}", payload)
    return conn.frame()


def test_nothing_set_leaves_nsqds_shapes(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = unique("plain")
    _channel(nsqd, topic)
    row = channel_stats(nsqd, topic, "c")
    assert "settings" not in row and "dropped_count" not in row
    assert "settings" not in nsqd.stats(topic)["topics"][0]
    assert "settings" not in nsqd.request("GET", "/stats").body.decode()
    metrics = nsqd.request("GET", "/metrics").body.decode()
    assert "nsq_channel_setting" not in metrics and "nsq_channel_dropped" not in metrics
    nsqd.stop()
    assert b"settings" not in (nsqd.data_path / "nsqd.dat").read_bytes()


def test_drop_head_keeps_the_newest_and_counts_the_rest(nsqd_factory) -> None:
    nsqd = nsqd_factory("--max-channel-depth=3")
    topic = unique("drophead")
    _channel(nsqd, topic)
    for i in range(5):
        assert _publish(nsqd, topic, f"m{i}".encode()) == 200
    row = channel_stats(nsqd, topic, "c")
    assert (row["depth"], row["dropped_count"]) == (3, 2)
    assert row["settings"] == {"max_channel_depth": 3, "channel_overflow": "drop-head"}
    conn = nsqd.connect()
    conn.identify()
    conn.sub(topic, "c")
    conn.send("RDY 10")
    assert [conn.message().body for _ in range(3)] == [b"m2", b"m3", b"m4"]
    assert nsqd.log().count("max_channel_depth 3 reached (drop-head): ") == 1  # at most once a second
    assert "WARNING: CHANNEL(c): max_channel_depth 3 reached (drop-head): 1 dropped so far" in nsqd.log()
    text = nsqd.request("GET", f"/stats?topic={topic}").body.decode()
    assert " dropped: 2 settings: max_channel_depth=3 channel_overflow=drop-head" in text
    metrics = nsqd.request("GET", "/metrics").body.decode()
    assert f'nsq_channel_setting{{channel="c",setting="max_channel_depth",topic="{topic}"}} 3.0' in metrics
    assert f'nsq_channel_dropped_total{{channel="c",topic="{topic}"}} 2.0' in metrics


def test_in_flight_and_deferred_count_toward_the_limit(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = unique("held")
    _channel(nsqd, topic)
    assert _post(nsqd, f"/channel/settings?topic={topic}&channel=c&max_channel_depth=2")[0] == 200
    conn = nsqd.connect()
    conn.identify()
    conn.sub(topic, "c")
    conn.send("RDY 1")
    assert _publish(nsqd, topic, b"in-flight") == 200
    assert conn.message().body == b"in-flight"
    assert nsqd.request("POST", f"/pub?topic={topic}&defer=60000", b"deferred").status == 200
    assert _publish(nsqd, topic, b"no room") == 200  # taken (OK), and dropped: nothing queued to drop instead
    row = channel_stats(nsqd, topic, "c")
    assert (row["in_flight_count"], row["deferred_count"], row["depth"], row["dropped_count"]) == (1, 1, 0, 1)


def test_reject_publish_refuses_whole_and_keeps_the_connection(nsqd_factory) -> None:
    nsqd = nsqd_factory("--max-channel-depth=3", "--channel-overflow=reject-publish")
    topic = unique("reject")
    _channel(nsqd, topic)
    _channel(nsqd, topic, "roomy")
    assert _post(nsqd, f"/channel/settings?topic={topic}&channel=roomy&max_channel_depth=0")[0] == 200
    conn = nsqd.connect()
    conn.identify()
    assert _mpub(conn, topic, [b"a", b"b"]) == (0, b"OK")
    ftype, data = _mpub(conn, topic, [b"c", b"d"])  # 2 + 2 > 3: none of them
    assert ftype == FRAME_ERROR
    assert data == f"E_MPUB_FAILED MPUB failed channel {topic}:c is full (max_channel_depth 3)".encode()
    conn.send(f"PUB {topic}", b"c")
    assert conn.frame() == (0, b"OK")  # the connection stayed, and one more fits
    conn.send(f"PUB {topic}", b"d")
    assert conn.frame()[1].startswith(b"E_PUB_FAILED PUB failed channel")
    reply = nsqd.request("POST", f"/pub?topic={topic}", b"e")
    assert reply.status == 503
    assert reply.json() == {"message": f"CHANNEL_FULL - channel {topic}:c is full (max_channel_depth 3)"}
    assert channel_stats(nsqd, topic, "c")["depth"] == 3
    assert channel_stats(nsqd, topic, "roomy")["depth"] == 3  # the unbounded channel got exactly the same
    other = unique("other")
    assert _publish(nsqd, other, b"x") == 200  # another topic is not slowed or refused


def test_overrides_resolve_channel_then_topic_then_default(nsqd_factory) -> None:
    nsqd = nsqd_factory("--max-channel-depth=100")
    topic = unique("resolve")
    _channel(nsqd, topic)
    status, answer = _post(nsqd, f"/topic/settings?topic={topic}&max_channel_depth=50")
    assert (status, answer["settings"]["max_channel_depth"]) == (200, {"value": 50, "source": "topic"})
    target = f"/channel/settings?topic={topic}&channel=c"
    got = nsqd.request("GET", target).json()["settings"]
    assert list(got) == [control.key for control in queue_settings.for_scope(queue_settings.CHANNEL)]
    assert (got["max_channel_depth"], got["channel_overflow"]) == ({"value": 50, "source": "topic"},
                                                                   {"value": "drop-head", "source": "default"})
    assert _post(nsqd, f"{target}&max_channel_depth=7")[1]["settings"]["max_channel_depth"] == {
        "value": 7, "source": "channel"}
    assert _post(nsqd, f"{target}&max_channel_depth=")[1]["settings"]["max_channel_depth"] == {
        "value": 50, "source": "topic"}
    assert _post(nsqd, f"/topic/settings?topic={topic}&max_channel_depth=")[1]["settings"][
        "max_channel_depth"] == {"value": 100, "source": "default"}


@pytest.mark.parametrize(("query", "status", "message"), [
    ("max_channel_depth=-1", 400, "INVALID_SETTING - max_channel_depth: must be a non-negative integer (0: no limit)"),
    ("max_channel_depth=ten", 400, "INVALID_SETTING - max_channel_depth: must be a non-negative integer (0: no limit)"),
    ("channel_overflow=drop-tail", 400, "INVALID_SETTING - channel_overflow: must be one of drop-head, reject-publish"),
    ("bogus=1", 400, "INVALID_SETTING - bogus: not a channel setting (known: "
                 f"{', '.join(control.key for control in queue_settings.for_scope(queue_settings.CHANNEL))})"),
])
def test_bad_values_get_a_400_and_change_nothing(nsqd_factory, query: str, status: int, message: str) -> None:
    nsqd = nsqd_factory()
    topic = unique("bad")
    _channel(nsqd, topic)
    reply = nsqd.request("POST", f"/channel/settings?topic={topic}&channel=c&max_channel_depth=5&{query}")
    assert (reply.status, reply.json()) == (status, {"message": message})
    assert nsqd.request("GET", f"/channel/settings?topic={topic}&channel=c").json()["settings"][
        "max_channel_depth"]["source"] == "default"
    assert nsqd.request("GET", "/ping").status == 200


def test_missing_queues_get_nsqds_404s(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    assert _post(nsqd, "/topic/settings?topic=nope&max_channel_depth=1") == (404, {"message": "TOPIC_NOT_FOUND"})
    topic = unique("missing")
    _channel(nsqd, topic)
    assert _post(nsqd, f"/channel/settings?topic={topic}&channel=nope&max_channel_depth=1") == (
        404, {"message": "CHANNEL_NOT_FOUND"})
    assert _post(nsqd, "/topic/settings?max_channel_depth=1") == (400, {"message": "MISSING_ARG_TOPIC"})


def _with_both_overrides(nsqd_factory, data: Path) -> tuple[NsqdProcess, str]:
    """An nsqd on ``data`` with a topic whose override is reject-publish and whose channel `c`'s is a depth of 2."""
    data.mkdir()
    nsqd = nsqd_factory(data_path=data)
    topic = unique(data.name)
    _channel(nsqd, topic)
    assert _post(nsqd, f"/topic/settings?topic={topic}&channel_overflow=reject-publish")[0] == 200
    assert _post(nsqd, f"/channel/settings?topic={topic}&channel=c&max_channel_depth=2")[0] == 200
    return nsqd, topic


def test_overrides_survive_a_restart_in_keys_go_ignores(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "kept"
    nsqd, topic = _with_both_overrides(nsqd_factory, data)
    stored = json.loads((data / "nsqd.dat").read_bytes())  # written before the answer
    entry = next(t for t in stored["topics"] if t["name"] == topic)
    assert list(entry) == ["name", "paused", "channels", "settings"]
    assert entry["settings"] == {"channel_overflow": "reject-publish"}
    assert entry["channels"][0] == {"name": "c", "paused": False, "settings": {"max_channel_depth": 2}}
    nsqd.stop()
    again = nsqd_factory(data_path=data)
    assert channel_stats(again, topic, "c")["settings"] == {"max_channel_depth": 2,
                                                              "channel_overflow": "reject-publish"}
    assert _publish(again, topic, b"1") == 200
    assert _publish(again, topic, b"2") == 200
    assert _publish(again, topic, b"3") == 503


def test_a_lower_drop_head_limit_drops_the_oldest_at_once(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = unique("lower")
    _channel(nsqd, topic)
    for i in range(10):
        _publish(nsqd, topic, f"m{i}".encode())
    _post(nsqd, f"/channel/settings?topic={topic}&channel=c&max_channel_depth=4")
    row = wait_until(lambda: (r := channel_stats(nsqd, topic, "c"))["depth"] == 4 and r)
    assert row["dropped_count"] == 6
    conn = nsqd.connect()
    conn.identify()
    conn.sub(topic, "c")
    conn.send("RDY 10")
    assert conn.message().body == b"m6"


@pytest.mark.parametrize(("args", "fatal"), [
    (["--max-channel-depth=-5"], "--max-channel-depth must be a non-negative integer (0: no limit)"),
    (["--max-channel-bytes=-1"], "--max-channel-bytes must be a non-negative integer (0: no limit)"),
    (["--channel-overflow=nope"], "--channel-overflow must be one of drop-head, reject-publish"),
])
def test_bad_defaults_are_fatal_at_start(tmp_path: Path, args: list[str], fatal: str) -> None:
    run = subprocess.run([str(NSQD_BIN), f"--data-path={tmp_path}", *args], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 1
    assert f"FATAL: failed to instantiate nsqd - {fatal}" in run.stderr


def test_toml_sets_the_default(nsqd_factory, tmp_path: Path) -> None:
    config = tmp_path / "nsqd.toml"
    config.write_text('max_channel_depth = 2\nchannel_overflow = "reject-publish"\n')
    nsqd = nsqd_factory(f"--config={config}")
    topic = unique("toml")
    _channel(nsqd, topic)
    assert [_publish(nsqd, topic, b"x") for _ in range(3)] == [200, 200, 503]
    assert nsqd.request("GET", "/config/max_channel_depth").body == b"2"


@pytest.mark.skipif(not GO_NSQD.exists(), reason="Go nsqd 1.3.0 is not at hand (NSQ_GO_NSQD): the downgrade path "
                                                 "is read by Go's own binary or not at all")
def test_go_nsqd_loads_our_settings_and_drops_them(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "downgrade"
    ours, topic = _with_both_overrides(nsqd_factory, data)
    assert ours.request("POST", f"/channel/pause?topic={topic}&channel=c").status == 200
    _publish(ours, topic, b"kept")
    ours.stop()
    go = GoNsqd(data).start()
    try:
        row = channel_stats(go, topic, "c")
        assert (row["depth"], row["paused"]) == (1, True)
        assert "settings" not in row
    finally:
        go.stop()
    stored = json.loads((data / "nsqd.dat").read_bytes())
    assert stored["topics"] == [{"name": topic, "paused": False, "channels": [{"name": "c", "paused": True}]}]


def test_max_channel_bytes_drops_the_head_by_body_bytes(nsqd_factory) -> None:
    nsqd = nsqd_factory("--max-channel-bytes=10")
    topic = unique("bytes")
    _channel(nsqd, topic)
    for body in (b"aaaa", b"bbbb", b"cccc"):  # 12 bytes of bodies > 10: the oldest goes
        assert _publish(nsqd, topic, body) == 200
    row = channel_stats(nsqd, topic, "c")
    assert (row["depth"], row["dropped_count"]) == (2, 1)
    assert row["settings"] == {"max_channel_bytes": 10, "channel_overflow": "drop-head"}
    assert "max_channel_bytes 10 reached (drop-head): 1 dropped so far" in nsqd.log()
    assert _publish(nsqd, topic, b"x" * 11) == 200  # alone over the limit: only it is dropped
    row = channel_stats(nsqd, topic, "c")
    assert (row["depth"], row["dropped_count"]) == (2, 2)
    assert nsqd.request("POST", f"/channel/empty?topic={topic}&channel=c").status == 200
    conn = nsqd.connect()
    conn.identify()
    conn.sub(topic, "c")
    conn.send("RDY 1")
    assert _publish(nsqd, topic, b"12345678") == 200
    assert conn.message().body == b"12345678"  # in flight, and still counted
    assert _publish(nsqd, topic, b"zzz") == 200
    assert channel_stats(nsqd, topic, "c")["depth"] == 0  # 8 in flight + 3 > 10: the new one is the oldest queued


def test_max_channel_bytes_rejects_and_counts_the_disk_after_a_restart(nsqd_factory) -> None:
    nsqd = nsqd_factory("--max-channel-bytes=10", "--channel-overflow=reject-publish", "--mem-queue-size=0")
    topic = unique("bytesreject")
    _channel(nsqd, topic)
    assert _publish(nsqd, topic, b"123456") == 200
    nsqd.stop()
    nsqd.start()
    assert channel_stats(nsqd, topic, "c")["backend_depth"] == 1
    reply = nsqd.request("POST", f"/pub?topic={topic}", b"123456")  # 6 on disk + 6 > 10
    assert (reply.status, reply.json()) == (503, {"message": f"CHANNEL_FULL - channel {topic}:c is full "
                                                             f"(max_channel_bytes 10)"})
    conn = nsqd.connect()
    conn.identify()
    ftype, data = _mpub(conn, topic, [b"12", b"34", b"5"])  # 6 + 5 > 10: refused whole
    assert (ftype, data) == (FRAME_ERROR, f"E_MPUB_FAILED MPUB failed channel {topic}:c is full "
                                          f"(max_channel_bytes 10)".encode())
    assert _mpub(conn, topic, [b"12", b"34"]) == (0, b"OK")
    assert channel_stats(nsqd, topic, "c")["depth"] == 3


def test_a_topic_override_shows_in_every_stats_form(nsqd_factory) -> None:
    """A topic row names its channels' default in "settings" but carries none of their counters."""
    nsqd = nsqd_factory()
    topic = unique("topicrow")
    _channel(nsqd, topic)
    assert _post(nsqd, f"/topic/settings?topic={topic}&max_channel_depth=5")[0] == 200
    assert nsqd.stats(topic)["topics"][0]["settings"] == {"max_channel_depth": 5}
    text = nsqd.request("GET", f"/stats?topic={topic}")
    assert text.status == 200
    assert " settings: max_channel_depth=5" in text.body.decode()
    metrics = nsqd.request("GET", "/metrics")
    assert metrics.status == 200
    assert f'nsq_topic_setting{{setting="max_channel_depth",topic="{topic}"}} 5.0' in metrics.body.decode()
