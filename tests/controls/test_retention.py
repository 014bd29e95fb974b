"""Retention and replay (beyond nsqd, issue 46 items 1 and 2) against the real nsqd process: --topic-retention and
--topic-retention-bytes, the retained segments, POST /channel/create?start=, POST /channel/reset, restarts, kill -9
at the durable settings, and Go nsqd 1.3.0 on such a data dir."""

from __future__ import annotations

import contextlib
import json
import signal
import struct
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support import GO_NSQD, GoNsqd, NsqdProcess, channel_stats, drain, unique, wait_until

pytestmark = pytest.mark.process


def _post(nsqd: NsqdProcess, target: str) -> tuple[int, dict]:
    reply = nsqd.request("POST", target)
    return reply.status, (reply.json() if reply.body else {})


def _mpub(nsqd: NsqdProcess, topic: str, bodies: list[bytes]) -> None:
    conn = nsqd.connect()
    try:
        for at in range(0, len(bodies), 500):
            chunk = bodies[at:at + 500]
            payload = struct.pack(">i", len(chunk)) + b"".join(struct.pack(">i", len(b)) + b for b in chunk)
            conn.send(f"MPUB {topic}", payload)
            assert conn.frame() == (0, b"OK")
    finally:
        conn.close()


def _segments(nsqd: NsqdProcess, topic: str) -> list[Path]:
    return sorted(nsqd.data_path.glob(f"{topic}.retained.*.dat"))


def _retained_bytes(nsqd: NsqdProcess, topic: str) -> int:
    """The size of the topic's segments; one trimmed between the listing and its stat counts as gone."""
    total = 0
    for path in _segments(nsqd, topic):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def _bodies(messages) -> list[bytes]:
    return [m.body for m in messages]


def _consume(nsqd: NsqdProcess, topic: str, channel: str, idle: float = 1.0) -> list:
    return drain(nsqd.tcp_port, topic, channel, idle=idle)


def test_off_by_default_no_files_and_nsqds_answers(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = unique("plain")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    reply = nsqd.request("POST", f"/channel/create?topic={topic}&channel=c")
    assert (reply.status, reply.body) == (200, b"")  # as nsqd answers, without a start
    assert nsqd.request("POST", f"/pub?topic={topic}", b"x").status == 200
    reply = nsqd.request("POST", f"/channel/create?topic={topic}&channel=r&start=earliest")
    assert (reply.status, reply.body) == (200, b"")  # no retention: start is no parameter of nsqd's, as in Go
    assert _post(nsqd, f"/channel/reset?topic={topic}&channel=r&to=earliest")[1]["message"].startswith(
        f"NO_RETENTION - topic {topic} keeps no messages")
    assert "settings" not in nsqd.stats(topic)["topics"][0]
    nsqd.stop()
    assert not list(nsqd.data_path.glob("*.retained.*"))
    assert b"settings" not in (nsqd.data_path / "nsqd.dat").read_bytes()


def test_keeps_fined_messages_and_replays_them_with_ids_and_timestamps(nsqd_factory) -> None:
    nsqd = nsqd_factory("--topic-retention=1h")
    topic = unique("keep")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    assert nsqd.request("POST", f"/pub?topic={topic}", b"one").status == 200
    _mpub(nsqd, topic, [b"two", b"three"])
    first = _consume(nsqd, topic, "c")
    assert _bodies(first) == [b"one", b"two", b"three"]
    assert channel_stats(nsqd, topic, "c")["depth"] == 0
    assert nsqd.stats(topic)["topics"][0]["settings"] == {"topic_retention": "1h0m0s"}
    assert _segments(nsqd, topic)
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=again&start=earliest")
    assert status == 200
    assert body["start"] == "earliest" and body["messages"] == 3 and body["before_retained"] is False
    again = _consume(nsqd, topic, "again")
    assert [(m.id, m.timestamp, m.body, m.attempts) for m in again] == [(m.id, m.timestamp, m.body, 1) for m in first]
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=again&start=earliest")
    assert status == 400 and body["message"].startswith("CHANNEL_EXISTS")


def test_replay_from_a_time_and_from_unix_ms_and_before_retained(nsqd_factory) -> None:
    nsqd = nsqd_factory("--topic-retention=1h")
    topic = unique("bytime")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    _mpub(nsqd, topic, [b"old1", b"old2"])
    time.sleep(0.05)
    cut = time.time_ns()
    time.sleep(0.05)
    _mpub(nsqd, topic, [b"new1", b"new2", b"new3"])
    rfc = datetime.fromtimestamp(cut / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=t&start={rfc}")
    assert (status, body["messages"], body["before_retained"]) == (200, 3, False)
    assert _bodies(_consume(nsqd, topic, "t")) == [b"new1", b"new2", b"new3"]
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=ms&start={cut // 1_000_000}")
    assert (status, body["messages"]) == (200, 3)
    assert _bodies(_consume(nsqd, topic, "ms")) == [b"new1", b"new2", b"new3"]
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=past&start=2001-01-01T00:00:00%2B02:00")
    assert (status, body["before_retained"], body["messages"]) == (200, True, 5)
    assert body["oldest_retained"] is not None
    assert _bodies(_consume(nsqd, topic, "past")) == [b"old1", b"old2", b"new1", b"new2", b"new3"]


def test_bad_input_is_400_and_a_missing_channel_404(nsqd_factory) -> None:
    nsqd = nsqd_factory("--topic-retention=1h")
    topic = unique("bad")
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 404  # no topic: as nsqd
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    for start in ("nope", "2026-13-01T00:00:00Z", "-5", "latest", "%C2%B2", "99999999999999999999",
                  "9999-12-31T23:59:59-23:59"):
        status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=c&start={start}")
        assert status == 400, start
        assert body["message"].startswith("INVALID_START - start must be earliest, an RFC 3339"), start
    assert nsqd.stats(topic)["topics"][0]["channels"] == []  # none of them made the channel
    missing = _post(nsqd, f"/channel/reset?topic={topic}&channel=zz&to=earliest")
    assert missing == (404, {"message": "CHANNEL_NOT_FOUND"})
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    assert _post(nsqd, f"/channel/reset?topic={topic}&channel=c") == (400, {"message": "MISSING_ARG_TO"})
    status, body = _post(nsqd, f"/channel/reset?topic={topic}&channel=c&to=yesterday")
    assert status == 400 and body["message"].startswith("INVALID_TO - to must be earliest, latest, an RFC 3339")
    status, body = _post(nsqd, f"/topic/settings?topic={topic}&topic_retention_bytes=-1")
    assert (status, body) == (400, {"message": "INVALID_SETTING - topic_retention_bytes: must be a non-negative "
                                               "number of bytes (0: no limit)"})
    status, body = _post(nsqd, f"/channel/settings?topic={topic}&channel=c&topic_retention=1h")
    assert status == 400 and body["message"].startswith("INVALID_SETTING - topic_retention: not a channel setting")


def test_trim_by_bytes_removes_whole_oldest_segments(nsqd_factory) -> None:
    nsqd = nsqd_factory("--topic-retention-bytes=3000", "--max-bytes-per-file=1000")
    topic = unique("trimbytes")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    bodies = [b"%03d" % i + b"x" * 70 for i in range(100)]  # 100 records of 4 + 26 + 73 bytes
    for body in bodies:
        assert nsqd.request("POST", f"/pub?topic={topic}", body).status == 200
    wait_until(lambda: _retained_bytes(nsqd, topic) <= 3000, what="trimmed to the size")
    assert len(_consume(nsqd, topic, "c")) == 100  # the channel kept everything
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=r&start=earliest")
    assert status == 200
    kept = _bodies(_consume(nsqd, topic, "r"))
    assert 2000 < len(kept) * 103 <= 3000 and kept == bodies[-len(kept):]  # the newest, contiguous
    assert body["messages"] == len(kept) and body["oldest_retained"] is not None
    assert "trimmed segment 1 (9 messages)" in nsqd.log()


def test_trim_by_time_and_switching_off_keep_what_a_replay_needs(nsqd_factory) -> None:
    nsqd = nsqd_factory("--topic-retention=2s", "--max-bytes-per-file=65536")
    topic = unique("trimtime")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    bodies = [b"%05d" % i + b"y" * 95 for i in range(10000)]  # ~1.3 MB: several batches, 20 segments
    _mpub(nsqd, topic, bodies)
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=slow&start=earliest")
    assert (status, body["messages"]) == (200, 10000)
    assert _post(nsqd, f"/topic/settings?topic={topic}&topic_retention=")[0] == 200  # off: nothing more is kept
    wait_until(lambda: "trimmed segment" in nsqd.log(), what="a trim")
    time.sleep(1.5)
    assert channel_stats(nsqd, topic, "c")["depth"] == 10000  # a channel's own queue is never touched
    got = _bodies(_consume(nsqd, topic, "slow"))
    assert got == bodies  # the replay under way lost nothing
    wait_until(lambda: not _segments(nsqd, topic), what="every unpinned segment trimmed")
    assert _post(nsqd, f"/topic/settings?topic={topic}&topic_retention=1s")[0] == 200
    _mpub(nsqd, topic, [b"late"])
    wait_until(lambda: not _segments(nsqd, topic) or "trimmed segment" in nsqd.log(), what="time trim")
    time.sleep(2.5)
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=none&start=earliest")
    assert (status, body["messages"], body["oldest_retained"]) == (200, 0, None)


def test_reset_back_and_forward_keeps_in_flight(nsqd_factory) -> None:
    nsqd = nsqd_factory("--topic-retention=1h")
    topic = unique("reset")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    bodies = [b"m%d" % i for i in range(10)]
    _mpub(nsqd, topic, bodies)
    assert _bodies(_consume(nsqd, topic, "c")) == bodies
    status, body = _post(nsqd, f"/channel/reset?topic={topic}&channel=c&to=earliest")
    assert (status, body["to"], body["messages"], body["dropped"]) == (200, "earliest", 10, 0)
    wait_until(lambda: channel_stats(nsqd, topic, "c")["depth"] == 10, what="replayed")
    conn = nsqd.connect()
    conn.identify()
    conn.sub(topic, "c")
    conn.send("RDY 1")
    held = conn.message()
    assert held.body == b"m0"
    status, body = _post(nsqd, f"/channel/reset?topic={topic}&channel=c&to=latest")
    assert (status, body["messages"], body["dropped"]) == (200, 0, 9)
    row = channel_stats(nsqd, topic, "c")
    assert (row["depth"], row["in_flight_count"]) == (0, 1)  # queued dropped, in flight stays
    conn.send(b"FIN " + held.id)
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0, what="FIN after the reset")
    conn.close()
    _mpub(nsqd, topic, [b"after"])
    assert _bodies(_consume(nsqd, topic, "c")) == [b"after"]


def test_restart_mid_replay_neither_loses_nor_duplicates(nsqd_factory) -> None:
    nsqd = nsqd_factory("--topic-retention=1h", "--max-bytes-per-file=262144")
    topic = unique("midreplay")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    bodies = [b"%05d" % i + b"z" * 45 for i in range(20000)]
    _mpub(nsqd, topic, bodies)
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=r&start=earliest")
    assert (status, body["messages"]) == (200, 20000)
    wait_until(lambda: channel_stats(nsqd, topic, "r")["depth"] >= 1024, what="the first batches")
    assert channel_stats(nsqd, topic, "r")["depth"] < 20000  # it waits for consumers
    assert list(nsqd.data_path.glob(f"{topic}.retained.replay.r.dat"))
    nsqd.stop()
    nsqd.start()
    got = _bodies(_consume(nsqd, topic, "r"))
    assert sorted(got) == bodies and len(got) == 20000
    wait_until(lambda: not list(nsqd.data_path.glob(f"{topic}.retained.replay.*")), what="the cursor removed")


def test_kill_9_at_the_durable_settings_keeps_every_acknowledged_message_replayable(nsqd_factory) -> None:
    flags = ("--topic-retention=1h", "--mem-queue-size=0", "--sync-every=1", "--max-bytes-per-file=65536")
    nsqd = nsqd_factory(*flags)
    topic = unique("kill9")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    acked: list[bytes] = []
    conn = nsqd.connect()
    for i in range(300):
        body = b"k%04d" % i + b"." * 200
        if i % 3:
            conn.send(f"PUB {topic}", body)
            assert conn.frame() == (0, b"OK")
            acked.append(body)
        else:
            batch = [body + b"a", body + b"b"]
            conn.send(f"MPUB {topic}", struct.pack(">i", 2) + b"".join(struct.pack(">i", len(b)) + b for b in batch))
            assert conn.frame() == (0, b"OK")
            acked.extend(batch)
    conn.close()
    nsqd.stop(sig=signal.SIGKILL)
    nsqd.start()
    status, body = _post(nsqd, f"/channel/create?topic={topic}&channel=after&start=earliest")
    assert status == 200 and body["messages"] >= len(acked)
    got = set(_bodies(_consume(nsqd, topic, "after")))
    assert set(acked) <= got


@pytest.mark.skipif(not GO_NSQD.exists(), reason="Go nsqd 1.3.0 is not at hand (NSQ_GO_NSQD)")
def test_go_nsqd_loads_the_data_dir_and_ignores_the_retained_log(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "go"
    ours = nsqd_factory("--topic-retention=1h", data_path=data)
    topic = unique("go")
    assert ours.request("POST", f"/topic/create?topic={topic}").status == 200
    assert ours.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    _mpub(ours, topic, [b"a", b"b", b"c"])
    assert _post(ours, f"/topic/settings?topic={topic}&topic_retention=1h")[0] == 200
    ours.stop()
    retained = sorted(p.name for p in data.glob(f"{topic}.retained.*"))
    go = GoNsqd(data).start()
    try:
        assert channel_stats(go, topic, "c")["depth"] == 3  # its queue, loaded; the retained log unread
    finally:
        go.stop()
    assert sorted(p.name for p in data.glob(f"{topic}.retained.*")) == retained  # Go left them alone
    assert "settings" not in json.dumps(json.loads((data / "nsqd.dat").read_bytes()))
    ours.start()  # Go dropped the override; the flag keeps retention on
    status, body = _post(ours, f"/channel/create?topic={topic}&channel=back&start=earliest")
    assert (status, body["messages"]) == (200, 3)
    assert _bodies(_consume(ours, topic, "back")) == [b"a", b"b", b"c"]


def test_a_cursor_past_the_log_end_resumes_at_the_end(nsqd_factory) -> None:
    """As a power loss can leave it: the replay had read records that were never synced, so the log now ends before
    its cursor; the replay goes on from the end, with no error, and what is published next arrives whole."""
    nsqd = nsqd_factory("--topic-retention=1h")
    topic = unique("pastend")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    _mpub(nsqd, topic, [b"%05d" % i + b"y" * 45 for i in range(20000)])  # 80-byte records
    assert _post(nsqd, f"/channel/create?topic={topic}&channel=r&start=earliest")[0] == 200
    wait_until(lambda: channel_stats(nsqd, topic, "r")["depth"] >= 1024, what="the first batches")
    nsqd.stop()
    (segment,) = [p for p in _segments(nsqd, topic) if ".replay." not in p.name]
    with open(segment, "r+b") as f:
        f.truncate(100 * 80)  # the power loss: only the first 100 records had been synced
    nsqd.start()
    fresh = [b"fresh%d" % i for i in range(5)]
    _mpub(nsqd, topic, fresh)
    got = _bodies(_consume(nsqd, topic, "r"))
    assert [b for b in got if b.startswith(b"fresh")] == fresh  # each once, whole
    assert "invalid record" not in nsqd.log()


def test_a_reset_keeps_the_in_flight_records_at_the_durable_settings(nsqd_factory) -> None:
    """A reset drops what is queued, not the disk records of the messages in flight: a crash brings those back."""
    nsqd = nsqd_factory("--topic-retention=1h", "--mem-queue-size=0", "--sync-every=1")
    topic = unique("resetkeep")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    _mpub(nsqd, topic, [b"held1", b"held2", b"held3", b"queued"])
    conn = nsqd.connect()
    conn.identify(msg_timeout=60000)
    conn.sub(topic, "c")
    conn.send("RDY 3")
    held = [conn.message().body for _ in range(3)]
    status, body = _post(nsqd, f"/channel/reset?topic={topic}&channel=c&to=latest")
    assert (status, body["dropped"]) == (200, 1)
    nsqd.stop(sig=signal.SIGKILL)
    nsqd.start()
    again = _bodies(_consume(nsqd, topic, "c"))
    assert set(held) <= set(again)  # the dropped one may come back too: its ack was not synced before the kill


def test_a_lower_max_msg_size_keeps_the_larger_retained_records(nsqd_factory) -> None:
    nsqd = nsqd_factory("--topic-retention=1h")
    topic = unique("bigrec")
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    bodies = [b"a" * 5000, b"small", b"b" * 5000]
    _mpub(nsqd, topic, bodies)
    assert _bodies(_consume(nsqd, topic, "c")) == bodies  # FINed: only the retained log has them now
    nsqd.stop()
    lower = nsqd_factory("--topic-retention=1h", "--max-msg-size=1000", data_path=nsqd.data_path)
    assert _post(lower, f"/channel/create?topic={topic}&channel=r&start=earliest")[1]["messages"] == 3
    assert _bodies(_consume(lower, topic, "r")) == bodies
