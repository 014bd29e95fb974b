"""Message TTL (beyond nsqd, issue 45 item 2) against the real nsqd: a message older than its channel's msg_ttl is
never delivered, wherever it waited, and is counted as expired, not as an attempt."""

from __future__ import annotations

import time

import pytest

from tests.support import NsqdProcess, channel_stats, unique, wait_until

pytestmark = pytest.mark.process


def _subscriber(nsqd: NsqdProcess, topic: str, rdy: int = 10):
    conn = nsqd.connect()
    conn.identify(msg_timeout=1000)
    conn.sub(topic, "c")
    conn.send(f"RDY {rdy}")
    return conn


def _create(nsqd: NsqdProcess, topic: str) -> None:
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200


def test_queued_messages_past_their_ttl_are_dropped(nsqd_factory) -> None:
    nsqd = nsqd_factory("--msg-ttl=300ms")
    topic = unique("ttl")
    _create(nsqd, topic)
    assert nsqd.request("POST", f"/pub?topic={topic}", b"old").status == 200
    time.sleep(0.5)
    assert nsqd.request("POST", f"/pub?topic={topic}", b"fresh").status == 200
    conn = _subscriber(nsqd, topic)
    msg = conn.message()
    assert (msg.body, msg.attempts) == (b"fresh", 1)
    row = channel_stats(nsqd, topic, "c")
    assert (row["expired_count"], row["settings"]) == (1, {"msg_ttl": "300ms"})
    assert " expired: 1 settings: msg_ttl=300ms" in nsqd.request("GET", f"/stats?topic={topic}").body.decode()


def test_deferred_and_timed_out_messages_expire_too(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = unique("ttlwait")
    _create(nsqd, topic)
    reply = nsqd.request("POST", f"/channel/settings?topic={topic}&channel=c&msg_ttl=1500ms")
    assert reply.json()["settings"]["msg_ttl"] == {"value": "1.5s", "source": "channel"}
    assert nsqd.request("POST", f"/pub?topic={topic}&defer=2000", b"deferred past its ttl").status == 200
    conn = _subscriber(nsqd, topic, rdy=1)
    assert nsqd.request("POST", f"/pub?topic={topic}", b"timed out").status == 200
    # never FINed: it times out after 1 s and comes back once (1 s old), then again at 2 s, past its 1.5 s
    assert [(m.body, m.attempts) for m in (conn.message(), conn.message())] == [(b"timed out", 1), (b"timed out", 2)]
    wait_until(lambda: channel_stats(nsqd, topic, "c")["expired_count"] == 2, timeout=10)
    row = channel_stats(nsqd, topic, "c")
    assert (row["timeout_count"], row["depth"], row["in_flight_count"], row["deferred_count"]) == (2, 0, 0, 0)


def test_a_topic_override_is_its_channels_default(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = unique("ttltopic")
    _create(nsqd, topic)
    assert nsqd.request("POST", f"/topic/settings?topic={topic}&msg_ttl=100ms").status == 200
    nsqd.request("POST", f"/pub?topic={topic}", b"gone")
    time.sleep(0.3)
    nsqd.request("POST", f"/pub?topic={topic}", b"kept")
    assert _subscriber(nsqd, topic).message().body == b"kept"
    assert channel_stats(nsqd, topic, "c")["expired_count"] == 1


@pytest.mark.parametrize(("value", "message"), [
    ("500us", "must be 0 (none) or at least 1ms"),
    ("-1s", "must be 0 (none) or at least 1ms"),
    ("soon", "must be a duration such as 30s or 1h30m (0: none)"),
])
def test_bad_ttls_get_a_400(nsqd_factory, value: str, message: str) -> None:
    nsqd = nsqd_factory()
    topic = unique("ttlbad")
    _create(nsqd, topic)
    reply = nsqd.request("POST", f"/topic/settings?topic={topic}&msg_ttl={value}")
    assert (reply.status, reply.json()) == (400, {"message": f"INVALID_SETTING - msg_ttl: {message}"})
