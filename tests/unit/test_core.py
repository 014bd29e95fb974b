"""Unit tests of the broker core (topics, channels, ids) with a recording consumer, no sockets."""

from __future__ import annotations

import gc
import io
import json
import os
import re
import time
from pathlib import Path

import gevent
import pytest

from nsqd_py.config.options import Options
from nsqd_py.core import stats
from nsqd_py.core.consumer import STATE_SUBSCRIBED, Consumer
from nsqd_py.core.errors import MessageError
from nsqd_py.core.guid import GuidFactory
from nsqd_py.core.message import Message, decode_record, unpark
from nsqd_py.core.nsqd import NSQD
from nsqd_py.runtime.log import Logger
from nsqd_py.wire.names import is_valid_name


class RecordingConsumer(Consumer):
    """A consumer that keeps what it was sent."""

    __slots__ = ("closed", "received")

    def __init__(self, rdy: int = 10, msg_timeout: float = 60.0) -> None:
        super().__init__()
        self.state = STATE_SUBSCRIBED
        self.ready_count = rdy
        self.msg_timeout = msg_timeout
        self.received: list[Message] = []
        self.closed = False

    def send_message(self, msg: Message) -> None:
        self.received.append(msg)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def nsqd(tmp_path: Path) -> NSQD:
    opts = Options(data_path=str(tmp_path), mem_queue_size=100)
    return NSQD(opts, Logger(stream=io.StringIO()))


def publish(nsqd: NSQD, topic_name: str, *bodies: bytes) -> None:
    nsqd.get_topic(topic_name).publish(list(bodies))
    gevent.sleep(0)


@pytest.mark.parametrize(
    ("name", "ok"),
    [("a", True), ("a" * 64, True), ("a" * 65, False), ("", False), ("t.x_y-z", True), ("t#ephemeral", True),
     ("t#eph", False), ("bad!", False), ("a\n", False), ("é", False), ("#ephemeral", False)],
)
def test_name_validation(name: str, ok: bool) -> None:
    assert is_valid_name(name) is ok


def test_guid_ids_are_hex_and_increasing() -> None:
    factory = GuidFactory(617)
    ids = [i for _ in range(50) for i in factory.new_ids(100)] + factory.new_ids(5000)
    assert all(re.fullmatch(rb"[0-9a-f]{16}", i) for i in ids)
    values = [int(i, 16) for i in ids]
    assert values == sorted(values) and len(set(values)) == len(values) == 10000
    assert (values[0] >> 12) & 0x3FF == 617


def test_message_encoding_round_trip() -> None:
    msg = Message(b"0123456789abcdef", b"body", 123456789, attempts=3)
    encoded = msg.encode()
    assert encoded == bytes.fromhex("00000000075bcd15" "0003") + b"0123456789abcdef" + b"body"
    back = unpark(decode_record(encoded))
    assert (back.id, back.body, back.timestamp, back.attempts) == (msg.id, msg.body, msg.timestamp, 3)
    frame = msg.frame()
    assert frame[:8] == (4 + len(encoded)).to_bytes(4, "big") + (2).to_bytes(4, "big")
    assert frame[8:] == encoded
    with pytest.raises(ValueError, match="invalid size 5"):
        decode_record(b"short")


def test_topic_holds_messages_until_first_channel(nsqd: NSQD) -> None:
    publish(nsqd, "t", b"a", b"b")
    topic = nsqd.get_topic("t")
    assert topic.depth() == 2
    channel = topic.get_channel("c")
    gevent.sleep(0)
    assert topic.depth() == 0 and channel.depth() == 2
    late = topic.get_channel("late")
    assert late.depth() == 0, "a later channel never sees older messages"


def test_fan_out_copies_per_channel_and_share_within_channel(nsqd: NSQD) -> None:
    topic = nsqd.get_topic("t")
    c1, c2 = topic.get_channel("c1"), topic.get_channel("c2")
    a, b, other = RecordingConsumer(), RecordingConsumer(), RecordingConsumer(rdy=100)
    c1.add_client(a)
    c1.add_client(b)
    c2.add_client(other)
    publish(nsqd, "t", *[str(i).encode() for i in range(20)])
    assert len(other.received) == 20
    assert len(a.received) + len(b.received) == 20 and a.received and b.received
    assert {m.id for m in a.received}.isdisjoint({m.id for m in b.received})
    assert all(m is not n for m in other.received for n in a.received)


def test_rdy_window_fin_and_attempts(nsqd: NSQD) -> None:
    channel = nsqd.get_topic("t").get_channel("c")
    consumer = RecordingConsumer(rdy=2)
    channel.add_client(consumer)
    publish(nsqd, "t", b"1", b"2", b"3")
    assert len(consumer.received) == 2 and channel.depth() == 1 and channel.in_flight_count() == 2
    channel.finish(consumer, consumer.received[0].id)
    assert len(consumer.received) == 3 and consumer.finish_count == 1
    assert all(m.attempts == 1 for m in consumer.received)
    with pytest.raises(MessageError, match="ID not in flight"):
        channel.finish(consumer, b"0" * 16)
    with pytest.raises(MessageError, match="client does not own message"):
        channel.finish(RecordingConsumer(), consumer.received[1].id)


def test_req_now_and_deferred(nsqd: NSQD) -> None:
    channel = nsqd.get_topic("t").get_channel("c")
    consumer = RecordingConsumer(rdy=1)
    channel.add_client(consumer)
    publish(nsqd, "t", b"x")
    channel.requeue(consumer, consumer.received[0].id, 0)
    assert len(consumer.received) == 2 and consumer.received[1].attempts == 2
    channel.requeue(consumer, consumer.received[1].id, 0.2)
    assert channel.deferred_count() == 1 and len(consumer.received) == 2
    assert not channel.process_deferred(time.monotonic())
    assert channel.process_deferred(time.monotonic() + 0.25)
    assert len(consumer.received) == 3 and channel.requeue_count == 2


def test_timeout_requeues_and_touch_extends_up_to_max(nsqd: NSQD) -> None:
    nsqd.opts.max_msg_timeout = 2 * 10**9
    channel = nsqd.get_topic("t").get_channel("c")
    consumer = RecordingConsumer(rdy=1, msg_timeout=1.0)
    channel.add_client(consumer)
    publish(nsqd, "t", b"x")
    msg = consumer.received[0]
    start = msg.deliver_ts
    channel.touch(consumer, msg.id)
    assert msg.deadline <= start + 2.0
    assert not channel.process_in_flight(start + 0.5)
    assert channel.process_in_flight(start + 2.01)
    assert channel.timeout_count == 1 and consumer.in_flight_count == 1
    assert consumer.received[-1].attempts == 2


def test_touched_message_does_not_hold_back_later_timeouts(nsqd: NSQD) -> None:
    nsqd.opts.max_msg_timeout = 10 * 10**9
    channel = nsqd.get_topic("t").get_channel("c")
    consumer = RecordingConsumer(rdy=2, msg_timeout=1.0)
    channel.add_client(consumer)
    publish(nsqd, "t", b"first", b"second")
    first, second = consumer.received
    gevent.sleep(0.05)
    channel.touch(consumer, first.id)  # first's deadline now lies after second's
    consumer.ready_count = 0  # timed-out messages stay queued
    assert channel.process_in_flight(second.deadline + 0.001)
    assert channel.in_flight_count() == 1 and channel.timeout_count == 1 and channel.depth() == 1
    assert not channel.process_in_flight(first.deadline - 0.001)
    assert channel.process_in_flight(first.deadline + 0.001)
    assert channel.timeout_count == 2 and channel.in_flight_count() == 0 and channel.depth() == 2


def test_out_of_order_fins_keep_timeouts_exact(nsqd: NSQD) -> None:
    channel = nsqd.get_topic("t").get_channel("c")
    consumer = RecordingConsumer(rdy=500, msg_timeout=1.0)
    channel.add_client(consumer)
    publish(nsqd, "t", *[b"%d" % i for i in range(400)])
    slow, *rest = consumer.received
    for msg in rest:  # everything but the oldest is FINed
        channel.finish(consumer, msg.id)
    assert channel.in_flight_count() == 1
    assert channel.process_in_flight(slow.deadline + 0.001)
    assert channel.timeout_count == 1 and consumer.received[-1].body == b"0"


def test_disconnect_keeps_in_flight_until_timeout(nsqd: NSQD) -> None:
    channel = nsqd.get_topic("t").get_channel("c")
    gone = RecordingConsumer(rdy=1, msg_timeout=1.0)
    channel.add_client(gone)
    publish(nsqd, "t", b"x")
    channel.remove_client(gone)
    assert channel.in_flight_count() == 1
    late = RecordingConsumer(rdy=1)
    channel.add_client(late)
    channel.process_in_flight(time.monotonic() + 1.1)
    assert [m.body for m in late.received] == [b"x"]


def test_paused_channel_accumulates(nsqd: NSQD) -> None:
    channel = nsqd.get_topic("t").get_channel("c")
    consumer = RecordingConsumer(rdy=10)
    channel.add_client(consumer)
    channel.pause()
    publish(nsqd, "t", b"a", b"b")
    assert not consumer.received and channel.depth() == 2
    channel.unpause()
    assert len(consumer.received) == 2


def test_sample_rate_drops_for_that_channel(nsqd: NSQD) -> None:
    channel = nsqd.get_topic("t").get_channel("c")
    consumer = RecordingConsumer(rdy=2500)
    consumer.sample_rate = 50
    channel.add_client(consumer)
    publish(nsqd, "t", *[b"m"] * 2000)
    assert 600 < len(consumer.received) < 1400
    assert channel.depth() == 0


def test_memory_overflow_goes_to_disk_and_comes_back(nsqd: NSQD) -> None:
    publish(nsqd, "t", *[str(i).encode() for i in range(250)])
    topic = nsqd.get_topic("t")
    assert topic.depth() == 250 and topic.backend_depth() == 150
    channel = topic.get_channel("c")
    gevent.sleep(0.01)
    consumer = RecordingConsumer(rdy=2500)
    channel.add_client(consumer)
    channel.dispatch()
    assert sorted(int(m.body) for m in consumer.received) == list(range(250))


def test_ephemeral_channel_deleted_with_last_client(nsqd: NSQD) -> None:
    topic = nsqd.get_topic("t")
    channel = topic.get_channel("c#ephemeral")
    consumer = RecordingConsumer()
    channel.add_client(consumer)
    channel.remove_client(consumer)
    gevent.sleep(0.01)
    assert "c#ephemeral" not in topic.channels


def test_ephemeral_topic_never_persisted(nsqd: NSQD) -> None:
    nsqd.get_topic("eph#ephemeral").get_channel("c")
    nsqd.get_topic("durable").get_channel("c#ephemeral")
    meta = json.loads(Path(nsqd.metadata_path).read_bytes())
    assert meta["topics"] == [{"name": "durable", "paused": False, "channels": None}]


def test_delete_topic_closes_consumers_and_removes_files(nsqd: NSQD, tmp_path: Path) -> None:
    nsqd.opts.mem_queue_size = 0
    topic = nsqd.get_topic("gone")
    channel = topic.get_channel("c")
    consumer = RecordingConsumer(rdy=0)
    channel.add_client(consumer)
    publish(nsqd, "gone", b"x")
    assert any(p.name.startswith("gone") for p in tmp_path.iterdir())
    assert nsqd.delete_existing_topic("gone")
    assert consumer.closed
    assert not any(p.name.startswith("gone") for p in tmp_path.iterdir())


@pytest.mark.parametrize("enabled", [True, False])
def test_stats_snapshot_pauses_the_collector_and_restores_it(nsqd: NSQD, enabled: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    nsqd.get_topic("t").get_channel("c")
    seen: list[bool] = []
    original = stats.topic_stats
    monkeypatch.setattr(stats, "topic_stats", lambda *args: (seen.append(gc.isenabled()), original(*args))[1])
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        snap = stats.snapshot(nsqd)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False]
    assert [t["topic_name"] for t in snap["topics"]] == ["t"]


def test_the_data_dir_is_listed_once_and_a_later_queue_still_salvages_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Data files without a meta file are salvaged when their topic is first created, however late, while the
    data dir is listed once for all the queues, not once per new queue."""
    record = Message(b"0123456789abcdef", b"orphaned", 123456789).encode()
    (tmp_path / "orphan.diskqueue.000003.dat").write_bytes(len(record).to_bytes(4, "big") + record)
    listings: list[str] = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: (listings.append(str(path)), real_listdir(path))[1])
    broker = NSQD(Options(data_path=str(tmp_path), mem_queue_size=0), Logger(stream=io.StringIO()))
    for i in range(20):
        broker.get_topic(f"t{i}").get_channel("c")
    orphan = broker.get_topic("orphan")
    assert listings == [str(tmp_path)]
    assert orphan.backend_depth() == 1
