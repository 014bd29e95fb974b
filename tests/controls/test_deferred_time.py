"""Deferred messages keep their time (beyond nsqd, issue 45 item 4, --persist-deferred) against the real nsqd: a DPUB
delay and a REQ delay survive SIGTERM, kill -9 at the durable settings and --mem-queue-size=0; the message comes at
its original due time, never early, never lost, and Go nsqd 1.3.0 still loads the data dir."""

from __future__ import annotations

import signal
import time

import pytest

from tests.support import GO_NSQD, GoNsqd, NsqdProcess, channel_stats, drain, unique, wait_until

pytestmark = pytest.mark.process

DURABLE = ("--mem-queue-size=0", "--sync-every=1")


def _subscriber(nsqd: NsqdProcess, topic: str, rdy: int = 10):
    conn = nsqd.connect(timeout=30)
    conn.identify(msg_timeout=60000)
    conn.sub(topic, "c")
    conn.send(f"RDY {rdy}")
    return conn


def _create(nsqd: NsqdProcess, topic: str) -> None:
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200


def _deferred_files(nsqd: NsqdProcess) -> list[str]:
    return sorted(p.name for p in nsqd.data_path.iterdir() if ".deferred." in p.name)


def _dpub(nsqd: NsqdProcess, topic: str, body: bytes, defer_ms: int) -> float:
    """Publish over TCP (DPUB); the wall time its delay started."""
    conn = nsqd.connect()
    started = time.time()
    conn.send(f"DPUB {topic} {defer_ms}", body)
    assert conn.frame() == (0, b"OK")
    conn.close()
    return started


@pytest.mark.parametrize(("flags", "stop"), [
    ((), signal.SIGTERM),
    (DURABLE, signal.SIGTERM),
    (DURABLE, signal.SIGKILL),
], ids=["sigterm", "memq0-sigterm", "memq0-kill9"])
def test_a_dpub_delay_survives_a_restart(nsqd_factory, flags: tuple[str, ...], stop: int) -> None:
    nsqd = nsqd_factory("--persist-deferred", *flags)
    topic = unique("dtime")
    _create(nsqd, topic)
    started = _dpub(nsqd, topic, b"later", 3000)
    assert channel_stats(nsqd, topic, "c")["deferred_count"] == 1
    nsqd.stop(sig=stop)
    nsqd.start()
    assert channel_stats(nsqd, topic, "c")["deferred_count"] == 1
    conn = _subscriber(nsqd, topic)
    msg = conn.message()
    assert (msg.body, msg.attempts) == (b"later", 1)
    assert time.time() >= started + 3.0  # never early
    conn.send(f"FIN {msg.id.decode()}")
    _nothing_left(nsqd, topic)


def test_a_req_delay_survives_kill_9_at_the_durable_settings(nsqd_factory) -> None:
    nsqd = nsqd_factory("--persist-deferred", *DURABLE)
    topic = unique("dreq")
    _create(nsqd, topic)
    assert nsqd.request("POST", f"/pub?topic={topic}", b"retry me").status == 200
    conn = _subscriber(nsqd, topic)
    msg = conn.message()
    conn.send(f"REQ {msg.id.decode()} 3000")
    requeued = time.time()
    wait_until(lambda: channel_stats(nsqd, topic, "c")["deferred_count"] == 1)
    time.sleep(0.2)  # the store's group commit, then the disk queue lets the original record go
    nsqd.stop(sig=signal.SIGKILL)
    nsqd.start()
    assert channel_stats(nsqd, topic, "c")["deferred_count"] == 1
    conn = _subscriber(nsqd, topic)
    again = conn.message()
    # the store's copy (attempts 2), not the disk queue's original record (which would come with attempts 1)
    assert (again.id, again.body, again.attempts) == (msg.id, b"retry me", 2)
    assert time.time() >= requeued + 3.0
    conn.send(f"FIN {again.id.decode()}")
    _nothing_left(nsqd, topic)


def _nothing_left(nsqd: NsqdProcess, topic: str) -> None:
    """Queue and store empty, and nothing delivered beyond what was FINed (a second copy would be in flight)."""
    wait_until(lambda: channel_stats(nsqd, topic, "c")["depth"] == 0)
    time.sleep(0.5)
    row = channel_stats(nsqd, topic, "c")
    assert (row["depth"], row["deferred_count"], row["in_flight_count"]) == (0, 0, 0)


def test_a_clean_shutdown_leaves_go_a_copy_that_we_do_not_deliver_twice(nsqd_factory) -> None:
    nsqd = nsqd_factory("--persist-deferred")
    topic = unique("dcopy")
    _create(nsqd, topic)
    _dpub(nsqd, topic, b"once", 1500)
    nsqd.stop()
    nsqd.start()
    row = channel_stats(nsqd, topic, "c")
    assert (row["deferred_count"], row["backend_depth"]) == (1, 1)  # the store's, and the disk queue's copy for Go
    nsqd.stop()  # a second shutdown writes another copy
    nsqd.start()
    conn = _subscriber(nsqd, topic)
    msg = conn.message()
    assert msg.body == b"once"
    conn.send(f"FIN {msg.id.decode()}")
    _nothing_left(nsqd, topic)


def test_without_the_flag_nothing_changes(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = unique("dplain")
    _create(nsqd, topic)
    _dpub(nsqd, topic, b"now", 60000)
    nsqd.stop()
    assert _deferred_files(nsqd) == []
    nsqd.start()
    row = channel_stats(nsqd, topic, "c")
    assert (row["deferred_count"], row["depth"]) == (0, 1)  # as nsqd: queued at once after a restart


def test_many_deferrals_compact_the_store_and_lose_nothing(nsqd_factory) -> None:
    nsqd = nsqd_factory("--persist-deferred", *DURABLE)
    topic = unique("dcompact")
    _create(nsqd, topic)
    producer = nsqd.connect(timeout=30)
    for delay, count in ((100, 2500), (60000, 50)):
        producer.send_raw(b"".join(b"DPUB %s %d\n" % (topic.encode(), delay) + len(b"m").to_bytes(4, "big") + b"m"
                                   for _ in range(count)))
        assert [producer.frame() for _ in range(count)] == [(0, b"OK")] * count  # one group commit for many
    # the short ones come due, queue, and leave the store: its dead entries pass the compaction threshold
    wait_until(lambda: channel_stats(nsqd, topic, "c")["deferred_count"] == 50, timeout=30)
    wait_until(lambda: any(name.endswith(".base") for name in _deferred_files(nsqd)), timeout=30)
    nsqd.stop(sig=signal.SIGKILL)
    nsqd.start()
    # the store may still hold some due ones whose removal the kill cut short: they come due at once, and the disk
    # queue's copies of them are dropped, so every due message arrives exactly once
    delivered = drain(nsqd.tcp_port, topic, "c", idle=2.0)
    assert len(delivered) == 2500
    assert len({m.id for m in delivered}) == 2500
    row = channel_stats(nsqd, topic, "c")
    assert (row["deferred_count"], row["depth"], row["in_flight_count"]) == (50, 0, 0)
    assert len([n for n in _deferred_files(nsqd) if n.endswith(".log")]) <= 3


@pytest.mark.skipif(GO_NSQD is None, reason="Go nsqd 1.3.0 is not on this machine (../shared/reference-go)")
def test_go_nsqd_loads_a_data_dir_with_deferred_messages(tmp_path, nsqd_factory) -> None:
    nsqd = nsqd_factory("--persist-deferred", data_path=tmp_path / "data")
    topic = unique("dgo")
    _create(nsqd, topic)
    _dpub(nsqd, topic, b"for go", 600000)
    nsqd.stop()
    assert _deferred_files(nsqd)
    go = GoNsqd(tmp_path / "data").start()
    try:
        row = channel_stats(go, topic, "c")
        assert (row["depth"], row["deferred_count"]) == (1, 0)  # Go delivers it at once: allowed, never lost
    finally:
        go.stop()


def test_emptying_a_channel_empties_its_store(nsqd_factory) -> None:
    nsqd = nsqd_factory("--persist-deferred")
    topic = unique("dempty")
    _create(nsqd, topic)
    _dpub(nsqd, topic, b"gone", 1000)
    assert nsqd.request("POST", f"/channel/empty?topic={topic}&channel=c").status == 200
    _dpub(nsqd, topic, b"kept", 1000)
    nsqd.stop(sig=signal.SIGKILL)
    nsqd.start()
    assert channel_stats(nsqd, topic, "c")["deferred_count"] == 1
    conn = _subscriber(nsqd, topic)
    msg = conn.message()
    assert msg.body == b"kept"
    conn.send(f"FIN {msg.id.decode()}")
    _nothing_left(nsqd, topic)
