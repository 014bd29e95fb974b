"""The driver-side subscription and the options, without Spark: RDY bounds what is held, TOUCH keeps held messages
alive past msg_timeout, and nothing connects until the reader is first asked for an offset."""

from __future__ import annotations

import contextlib
import pickle
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from nsqd_py.client.errors import NSQConnectionError
from nsqd_py.spark.consumer import SourceConsumer
from nsqd_py.spark.control import DrainServer
from nsqd_py.spark.driver_reader import DriverStreamReader
from nsqd_py.spark.options import ReadOptions
from nsqd_py.testing import free_port
from tests.spark.util import drained, publish
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow


def read_options(nsqd: NsqdProcess, topic: str, **extra: str) -> ReadOptions:
    return ReadOptions.parse({"Topic": topic, "CHANNEL": "c", "nsqdTcpAddresses": nsqd.tcp_address, **extra})


@contextlib.contextmanager
def running(opts: ReadOptions, max_in_flight: int) -> Iterator[SourceConsumer]:
    """A started SourceConsumer, closed after the block."""
    consumer = SourceConsumer(opts, max_in_flight=max_in_flight)
    consumer.start()
    try:
        yield consumer
    finally:
        consumer.close()


def test_reader_connects_lazily_and_pickles_without_sockets(nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic = name("lazy")
    reader = DriverStreamReader(read_options(nsqd, topic))
    assert not nsqd.stats(topic=topic)["topics"]  # nothing subscribed yet
    publish(nsqd, topic, [b"one"])
    try:
        start = reader.initialOffset()
        end = wait_until(lambda: reader.latestOffset(start, ReadAllAvailable()) != start and reader.latestOffset(
            start, ReadAllAvailable()))  # asked again for the same start, the same answer
        assert end == {"seq": 1}
        copy = pickle.loads(pickle.dumps(reader))
        [part] = reader.partitions({"seq": 0}, end)
        [batch] = copy.read(pickle.loads(pickle.dumps(part)))
        assert batch.column("body").to_pylist() == [b"one"] and batch.column("topic").to_pylist() == [topic]
        assert channel_stats(nsqd, topic, "c")["in_flight_count"] == 1
        # nothing new: an empty batch, so that Spark commits the first one
        assert reader.latestOffset(end, ReadAllAvailable()) == {"seq": 2}
        reader.commit(end)
        wait_until(lambda: drained(nsqd, topic, "c"))
        assert reader.latestOffset({"seq": 2}, ReadAllAvailable()) == {"seq": 2}
    finally:
        reader.stop()


def test_a_batch_is_full_while_the_previous_one_awaits_its_commit(nsqd: NsqdProcess,
                                                                   name: Callable[[str], str]) -> None:
    topic = name("full")
    publish(nsqd, topic, [b"m%d" % i for i in range(350)])
    reader = DriverStreamReader(read_options(nsqd, topic, maxOffsetsPerTrigger="100"))
    try:
        consumer = reader._state().consumer
        wait_until(lambda: consumer.unsettled_count() == 300)  # the window: three batches
        assert reader.latestOffset({"seq": 0}, ReadAllAvailable()) == {"seq": 1}
        # Spark commits batch 1 only after planning batch 2, so batch 2 comes from the rest of the window
        assert reader.latestOffset({"seq": 1}, ReadAllAvailable()) == {"seq": 2}
        for seq in (1, 2):
            assert sum(p.value for p in reader.partitions({"seq": seq - 1}, {"seq": seq})) == 100
        assert channel_stats(nsqd, topic, "c")["in_flight_count"] == 300
        reader.commit({"seq": 1})  # frees the window for the last 50
        wait_until(lambda: consumer.unsettled_count() == 250)
        # batch 3 was buffered while batch 2 was planned: full, whatever arrived after the commit
        assert reader.latestOffset({"seq": 2}, ReadAllAvailable()) == {"seq": 3}
        assert sum(p.value for p in reader.partitions({"seq": 2}, {"seq": 3})) == 100
        assert reader.latestOffset({"seq": 3}, ReadAllAvailable()) == {"seq": 4}
        assert sum(p.value for p in reader.partitions({"seq": 3}, {"seq": 4})) == 50
    finally:
        reader.stop()


def test_connections_follow_nsqd_max_rdy_count(nsqd_factory: Callable[..., NsqdProcess],
                                               name: Callable[[str], str]) -> None:
    """RDY per connection is capped by nsqd's --max-rdy-count: the reader opens as many as its window needs."""
    topic = name("rdycap")
    small = nsqd_factory("--max-rdy-count=40")
    publish(small, topic, [b"m%d" % i for i in range(150)])
    with running(read_options(small, topic), max_in_flight=100):
        # ceil(100 / 40) connections, sharing the window
        wait_until(lambda: sorted(c["ready_count"] for c in channel_stats(small, topic, "c")["clients"])
                   == [33, 33, 33])
    many = name("rdycapped")
    publish(small, many, [b"m"])
    with running(read_options(small, many), max_in_flight=5000):  # 125 connections: capped at 100
        wait_until(lambda: [c["ready_count"] for c in channel_stats(small, many, "c")["clients"]] == [40] * 100)


def test_byte_budget_pauses_delivery_until_a_commit(nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic = name("bytes")
    publish(nsqd, topic, [b"%0100d" % i for i in range(100)])
    with running(read_options(nsqd, topic, maxInFlightBytes="1000"), max_in_flight=30) as consumer:
        wait_until(lambda: [c["ready_count"] for c in channel_stats(nsqd, topic, "c")["clients"]] == [0])
        held = consumer.unsettled_count()
        assert 10 <= held <= 30  # over 1000 bytes of 100-byte bodies, at most the RDY window
        time.sleep(0.3)
        assert consumer.unsettled_count() == held
        consumer.finish(consumer.take(100))
        wait_until(lambda: consumer.unsettled_count() >= 10 and channel_stats(nsqd, topic, "c")["depth"] < 90)


def test_rdy_bounds_what_is_held(nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic = name("rdy")
    publish(nsqd, topic, [b"m%d" % i for i in range(50)])
    with running(read_options(nsqd, topic), max_in_flight=10) as consumer:
        wait_until(lambda: consumer.unsettled_count() == 10)
        time.sleep(0.5)
        assert consumer.unsettled_count() == 10
        assert channel_stats(nsqd, topic, "c")["in_flight_count"] == 10
        got = consumer.take(100)
        assert len(got) == 10
        consumer.finish(got[:4])
        wait_until(lambda: consumer.unsettled_count() == 10 and len(consumer.take(100, wait=1)) > 0)


def test_touch_keeps_held_messages_in_flight(nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic = name("touch")
    publish(nsqd, topic, [b"a", b"b", b"c"])
    with running(read_options(nsqd, topic, msgTimeout="1s"), max_in_flight=10) as consumer:
        held = consumer.take(10, wait=5)
        while len(held) < 3:
            held += consumer.take(10, wait=5)
        time.sleep(3)  # three msg_timeouts
        stats = channel_stats(nsqd, topic, "c")
        assert stats["timeout_count"] == 0 and stats["in_flight_count"] == 3
        consumer.finish(held)
        wait_until(lambda: drained(nsqd, topic, "c"))
        assert channel_stats(nsqd, topic, "c")["timeout_count"] == 0


def test_requeue_buffered_hands_messages_back(nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic = name("requeue")
    publish(nsqd, topic, [b"x%d" % i for i in range(5)])
    with running(read_options(nsqd, topic), max_in_flight=5) as consumer:
        wait_until(lambda: consumer.unsettled_count() == 5)
        consumer.requeue_buffered()
        wait_until(lambda: channel_stats(nsqd, topic, "c")["depth"] == 5)
        stats = channel_stats(nsqd, topic, "c")
        assert stats["in_flight_count"] == 0 and stats["requeue_count"] == 5


def test_unreachable_nsqd_fails_at_start() -> None:
    opts = ReadOptions.parse({"topic": "t", "channel": "c", "nsqdTcpAddresses": f"127.0.0.1:{free_port()}"})
    with pytest.raises(NSQConnectionError, match=r"could not subscribe on any of .*refused"):
        SourceConsumer(opts, max_in_flight=10).start()


def test_drain_socket_is_taken_over_from_a_dead_reader_only(tmp_path: Path) -> None:
    path = str(tmp_path / "reader.sock")
    first = DrainServer(path, lambda: None, lambda: True)
    assert first.start()
    assert not DrainServer(path, lambda: None, lambda: True).start()  # a live reader keeps it
    assert first._sock is not None
    # as if killed: nobody listens, the socket file stays behind (shutdown first: a plain close leaves the socket
    # listening while the serving thread still waits in accept())
    first._sock.shutdown(socket.SHUT_RDWR)
    first._sock.close()
    second = DrainServer(path, lambda: None, lambda: True)
    try:
        assert second.start()
    finally:
        second.close()
    assert not Path(path).exists()
