"""GET /channel/peek and /topic/peek (beyond nsqd, issue 46 item 4) against the real nsqd process: the next
messages in the order a consumer then gets them (memory, disk, both), deferred and in flight with their times and
client, the state filter, truncation, the caps and bad input, and that looking changes nothing."""

from __future__ import annotations

import base64
import time

import pytest

from tests.support import FRAME_RESPONSE, NsqdProcess, RawConn, channel_stats, drain, unique, wait_until

pytestmark = pytest.mark.process


def _setup(nsqd: NsqdProcess, prefix: str, count: int = 0) -> str:
    """A topic with channel `c` and ``count`` messages `m0`... published one by one."""
    topic = unique(prefix)
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    for i in range(count):
        assert nsqd.request("POST", f"/pub?topic={topic}", f"m{i}".encode()).status == 200
    return topic


def _peek(nsqd: NsqdProcess, query: str, path: str = "/channel/peek") -> list[dict]:
    reply = nsqd.request("GET", f"{path}?{query}")
    assert reply.status == 200, reply.body
    return reply.json()["messages"]


def _bodies(messages: list[dict]) -> list[bytes]:
    return [base64.b64decode(m["body"]) for m in messages]


def _stats(nsqd: NsqdProcess, topic: str) -> dict:
    return nsqd.stats(topic, include_mem="false")


def _subscriber(nsqd: NsqdProcess, topic: str, rdy: int, **identify: object) -> RawConn:
    conn = nsqd.connect()
    conn.identify(**identify)
    assert conn.sub(topic, "c") == (FRAME_RESPONSE, b"OK")
    conn.send(f"RDY {rdy}")
    return conn


@pytest.mark.parametrize("flags", [(), ("--mem-queue-size=0",), ("--mem-queue-size=2",)],
                         ids=["memory", "disk", "both"])
def test_queued_messages_come_in_the_order_a_consumer_gets_them(nsqd_factory, flags) -> None:
    """With 2 in memory and the rest on disk the channel takes memory and disk in turns (m0 m2 m1 m3 ...): the peek
    shows that order, changes no count, and the consumer then gets each message as its first attempt."""
    nsqd = nsqd_factory(*flags)
    topic = _setup(nsqd, "order", 8)
    before = _stats(nsqd, topic)
    peeked = _peek(nsqd, f"topic={topic}&channel=c&n=100")
    assert _peek(nsqd, f"topic={topic}&channel=c&n=3") == peeked[:3]
    assert _stats(nsqd, topic) == before
    assert len(peeked) == 8 and {m["state"] for m in peeked} == {"queued"}
    assert {m["attempts"] for m in peeked} == {0} and all("deadline" not in m for m in peeked)
    if flags == ("--mem-queue-size=2",):
        assert _bodies(peeked) == [b"m0", b"m2", b"m1", b"m3", b"m4", b"m5", b"m6", b"m7"]
        assert channel_stats(nsqd, topic, "c")["backend_depth"] == 6
    got = drain(nsqd.tcp_port, topic, "c")
    assert [m.id.decode() for m in got] == [m["id"] for m in peeked]
    assert [m.body for m in got] == _bodies(peeked)
    assert [m.timestamp for m in got] == [m["timestamp"] for m in peeked]
    assert {m.attempts for m in got} == {1}


def test_deferred_by_due_time_with_deliver_at(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = _setup(nsqd, "deferred")
    start = time.time() * 1000
    for body, delay in ((b"later", 60_000), (b"soon", 30_000), (b"last", 90_000)):
        assert nsqd.request("POST", f"/pub?topic={topic}&defer={delay}", body).status == 200
    peeked = _peek(nsqd, f"topic={topic}&channel=c&n=10&state=deferred")
    assert _bodies(peeked) == [b"soon", b"later", b"last"] and {m["state"] for m in peeked} == {"deferred"}
    for msg, delay in zip(peeked, (30_000, 60_000, 90_000), strict=True):
        assert start + delay - 1000 < msg["deliver_at"] < time.time() * 1000 + delay + 1000
    assert _peek(nsqd, f"topic={topic}&channel=c&n=10&state=queued") == []
    assert channel_stats(nsqd, topic, "c")["deferred_count"] == 3


def test_in_flight_by_deadline_with_the_client_that_holds_it(nsqd_factory) -> None:
    """Two consumers, msg_timeout 40 s and 20 s: the second one's message is due first. Its later FIN and a TOUCH
    still work, and the peek moved no deadline (a second peek gives the same)."""
    nsqd = nsqd_factory()
    topic = _setup(nsqd, "inflight", 2)
    slow = _subscriber(nsqd, topic, 1, client_id="slow", hostname="slow.example", msg_timeout=40_000)
    first = slow.message()
    fast = _subscriber(nsqd, topic, 1, client_id="fast", hostname="fast.example", msg_timeout=20_000)
    second = fast.message()
    now = time.time() * 1000
    peeked = _peek(nsqd, f"topic={topic}&channel=c&n=10&state=in_flight")
    assert [m["id"] for m in peeked] == [second.id.decode(), first.id.decode()]
    assert peeked[0]["deadline"] == pytest.approx(now + 20_000, abs=2000)
    assert peeked[1]["deadline"] == pytest.approx(now + 40_000, abs=2000)
    assert {m["attempts"] for m in peeked} == {1} and {m["state"] for m in peeked} == {"in_flight"}
    clients = {c["client_id"]: c for c in channel_stats(nsqd, topic, "c")["clients"]}
    for msg, name in zip(peeked, ("fast", "slow"), strict=True):
        row = clients[name]
        assert msg["client"] == {"client_id": name, "hostname": row["hostname"],
                                 "remote_address": row["remote_address"]}
    assert _peek(nsqd, f"topic={topic}&channel=c&n=10&state=in_flight") == peeked
    slow.send(b"TOUCH " + first.id)
    fast.send(b"FIN " + second.id)
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 1, what="the FIN")
    assert [m["id"] for m in _peek(nsqd, f"topic={topic}&channel=c&n=10")] == [first.id.decode()]
    fast.close()
    slow.close()


def test_no_state_lists_queued_then_in_flight_then_deferred(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = _setup(nsqd, "all", 1)
    conn = _subscriber(nsqd, topic, 1)
    assert conn.message().body == b"m0"
    for i in (1, 2):
        assert nsqd.request("POST", f"/pub?topic={topic}", f"m{i}".encode()).status == 200
    assert nsqd.request("POST", f"/pub?topic={topic}&defer=60000", b"d").status == 200
    peeked = _peek(nsqd, f"topic={topic}&channel=c&n=10")
    assert [(m["state"], base64.b64decode(m["body"])) for m in peeked] == [
        ("queued", b"m1"), ("queued", b"m2"), ("in_flight", b"m0"), ("deferred", b"d")]
    assert "deliver_at" in peeked[3] and "deadline" in peeked[2] and "client" in peeked[2]
    assert [m["state"] for m in _peek(nsqd, f"topic={topic}&channel=c&n=3")] == ["queued", "queued", "in_flight"]
    conn.close()


def test_a_large_body_is_cut_with_its_full_size(shared_nsqd) -> None:
    topic = _setup(shared_nsqd, "big")
    body = bytes(range(256)) * 20  # 5,120 bytes, not UTF-8
    assert shared_nsqd.request("POST", f"/pub?topic={topic}", body).status == 200
    assert shared_nsqd.request("POST", f"/pub?topic={topic}", b"small").status == 200
    big, small = _peek(shared_nsqd, f"topic={topic}&channel=c&n=2")
    assert (big["body_size"], big["truncated"], base64.b64decode(big["body"])) == (5120, True, body[:4096])
    assert (small["body_size"], small["truncated"], small["body"]) == (5, False, base64.b64encode(b"small").decode())
    assert len(big["id"]) == 16 and big["timestamp"] > 0


@pytest.mark.parametrize(("query", "status", "message"), [
    ("n=0", 400, "INVALID_N"), ("n=-1", 400, "INVALID_N"), ("n=1001", 400, "INVALID_N"),
    ("n=abc", 400, "INVALID_N"), ("n=1.5", 400, "INVALID_N"), ("n=", 400, "INVALID_N"),
    ("state=bogus", 400, "INVALID_STATE"), ("state=QUEUED", 400, "INVALID_STATE"),
])
def test_bad_input(shared_nsqd, query, status, message) -> None:
    topic = _setup(shared_nsqd, "bad")
    reply = shared_nsqd.request("GET", f"/channel/peek?topic={topic}&channel=c&{query}")
    assert reply.status == status and reply.json()["message"].startswith(f"{message} - "), reply.body
    if query.startswith("n="):
        reply = shared_nsqd.request("GET", f"/topic/peek?topic={topic}&{query}")
        assert reply.status == status and reply.json()["message"].startswith(f"{message} - ")


def test_missing_names_and_the_cap(shared_nsqd) -> None:
    topic = _setup(shared_nsqd, "names", 3)

    def answer(target: str) -> tuple[int, dict]:
        reply = shared_nsqd.request("GET", target)
        return reply.status, reply.json()

    assert answer(f"/channel/peek?topic={topic}&channel=nope") == (404, {"message": "CHANNEL_NOT_FOUND"})
    assert answer("/channel/peek?topic=nope_none&channel=c") == (404, {"message": "TOPIC_NOT_FOUND"})
    assert answer("/topic/peek?topic=nope_none") == (404, {"message": "TOPIC_NOT_FOUND"})
    assert answer(f"/channel/peek?topic={topic}") == (400, {"message": "MISSING_ARG_CHANNEL"})
    assert answer("/topic/peek") == (400, {"message": "MISSING_ARG_TOPIC"})
    status, body = answer(f"/channel/peek?topic={topic}&channel=c&n=1000")
    assert status == 200 and body["topic"] == topic and body["channel"] == "c" and len(body["messages"]) == 3
    assert len(_peek(shared_nsqd, f"topic={topic}&channel=c")) == 1  # n defaults to 1
    assert shared_nsqd.request("POST", f"/channel/peek?topic={topic}&channel=c").status == 405


def test_topic_peek_shows_the_topics_own_backlog(nsqd_factory) -> None:
    """A topic without channels keeps what it is sent (2 in memory, the rest on disk); a paused one too, while its
    channel shows nothing. The first channel then gets them in the order shown."""
    nsqd = nsqd_factory("--mem-queue-size=2")
    topic = unique("backlog")
    for i in range(5):
        assert nsqd.request("POST", f"/pub?topic={topic}", f"m{i}".encode()).status == 200
    before = _stats(nsqd, topic)
    peeked = _peek(nsqd, f"topic={topic}&n=10", "/topic/peek")
    assert _bodies(peeked) == [b"m0", b"m2", b"m1", b"m3", b"m4"] and {m["state"] for m in peeked} == {"queued"}
    assert _stats(nsqd, topic) == before
    assert nsqd.request("POST", f"/topic/pause?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200
    assert _peek(nsqd, f"topic={topic}&channel=c&n=10") == []
    assert _peek(nsqd, f"topic={topic}&n=10", "/topic/peek") == peeked
    conn = _subscriber(nsqd, topic, 0)
    assert nsqd.request("POST", f"/topic/unpause?topic={topic}").status == 200
    conn.close()
    got = drain(nsqd.tcp_port, topic, "c")
    assert sorted(m.body for m in got) == sorted(_bodies(peeked))
    assert _peek(nsqd, f"topic={topic}&n=10", "/topic/peek") == []


def test_peeking_the_disk_queue_reads_nothing_off_it(nsqd_factory, tmp_path) -> None:
    """At --mem-queue-size=0 everything is on disk: after peeks and a restart every message is still there, the
    meta file as it was, and each is delivered once, as its first attempt."""
    data = tmp_path / "peekdisk"
    nsqd = nsqd_factory("--mem-queue-size=0", data_path=data)
    topic = _setup(nsqd, "restart", 6)
    peeked = _peek(nsqd, f"topic={topic}&channel=c&n=10")
    assert _peek(nsqd, f"topic={topic}&channel=c&n=10") == peeked
    assert channel_stats(nsqd, topic, "c")["backend_depth"] == 6
    nsqd.stop()
    meta = (data / f"{topic}:c.diskqueue.meta.dat").read_bytes()
    again = nsqd_factory("--mem-queue-size=0", data_path=data)
    assert _peek(again, f"topic={topic}&channel=c&n=10") == peeked
    assert (data / f"{topic}:c.diskqueue.meta.dat").read_bytes() == meta
    got = drain(again.tcp_port, topic, "c")
    assert [m.id.decode() for m in got] == [m["id"] for m in peeked] and {m.attempts for m in got} == {1}
    assert _peek(again, f"topic={topic}&channel=c&n=10") == []


def test_a_peek_of_large_disk_records_stops_at_32_mib(nsqd_factory) -> None:
    nsqd = nsqd_factory("--mem-queue-size=0")
    topic = _setup(nsqd, "peekbig")
    for i in range(40):
        assert nsqd.request("POST", f"/pub?topic={topic}", bytes([65 + i % 26]) * 1_000_000).status == 200
    found = _peek(nsqd, f"topic={topic}&channel=c&n=40")
    assert len(found) == 33  # 33 records of 1 MB fit in 32 MiB, and the next would not
    assert all(m["body_size"] == 1_000_000 and m["truncated"] for m in found)
    assert channel_stats(nsqd, topic, "c")["depth"] == 40
