"""The driver-side subscription and the options, without Spark: RDY bounds what is held, TOUCH keeps held messages
alive past msg_timeout, and nothing connects until the reader is first asked for an offset."""

from __future__ import annotations

import contextlib
import pickle
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from nsqd_py.client.errors import NSQConnectionError
from nsqd_py.spark.consumer import Consumer
from nsqd_py.spark.control import DrainServer
from nsqd_py.spark.driver_reader import DriverStreamReader
from nsqd_py.spark.options import ConnectOptions, OptionError, ReadOptions, WriteOptions
from nsqd_py.testing import free_port
from tests.spark.util import drained, publish
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow


def read_options(nsqd: NsqdProcess, topic: str, **extra: str) -> ReadOptions:
    return ReadOptions.parse({"Topic": topic, "CHANNEL": "c", "nsqd_tcp_addresses": nsqd.tcp_address, **extra})


@contextlib.contextmanager
def running(opts: ReadOptions, max_in_flight: int) -> Iterator[Consumer]:
    """A started Consumer, closed after the block."""
    consumer = Consumer(opts, max_in_flight=max_in_flight)
    consumer.start()
    try:
        yield consumer
    finally:
        consumer.close()


def test_options_are_validated_case_insensitively() -> None:
    opts = ReadOptions.parse({"topic": "t", "channel": "c", "LOOKUPD_HTTP_ADDRESSES": "a:4161, b:4161",
                              "Max_Messages_Per_Batch": "50", "msg_timeout": "1m30s", "snappy": "true"})
    assert opts.connect.lookupd_http_addresses == ("a:4161", "b:4161")
    assert opts.max_messages_per_batch == 50 and opts.connect.msg_timeout == 90
    assert opts.max_in_flight == 150  # three batches: one awaiting its commit, one running, one filling
    assert opts.connect.identify_fields() == {"tls_v1": False, "snappy": True, "deflate": False,
                                              "msg_timeout": 90000}
    assert ReadOptions.parse({"topic": "t", "channel": "c", "nsqd_tcp_addresses": "h:1",
                              "msg_timeout": "2500"}).connect.msg_timeout == 2.5  # bare numbers are ms
    bad = [
        ({"channel": "c", "nsqd_tcp_addresses": "h:1"}, "topic"),
        ({"topic": "t", "channel": "bad channel", "nsqd_tcp_addresses": "h:1"}, "channel"),
        ({"topic": "t", "channel": "c"}, "exactly one"),
        ({"topic": "t", "channel": "c", "nsqd_tcp_addresses": "h:1", "lookupd_http_addresses": "l:1"}, "exactly one"),
        ({"topic": "t", "channel": "c", "nsqd_tcp_addresses": "h:1", "snappy": "yes", "deflate": "1"}, "snappy"),
        ({"topic": "t", "channel": "c", "nsqd_tcp_addresses": "h:1", "msg_timeout": "10ms"}, "at least 1s"),
        ({"topic": "t", "channel": "c", "nsqd_tcp_addresses": "h:1", "max_messages_per_batch": "0"}, "at least 1"),
        ({"topic": "t", "channel": "c", "nsqd_tcp_addresses": "h:1", "tls": "maybe"}, "true or false"),
    ]
    for options, message in bad:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(options)
    assert WriteOptions.parse({"topic": "t", "nsqd_tcp_addresses": "h:1"}).mpub_max_messages == 500


#: every option a class declares, a value for it, and what the field then holds (0 s means the default for some)
DECLARED = {
    ReadOptions: {"maxOffsetsPerTrigger": ("7", 7), "minOffsetsPerTrigger": ("3", 3), "maxTriggerDelay": ("2s", 2.0),
                  "maxBytesPerTrigger": ("100", 100), "minPartitions": ("5", 5), "failOnUnreachable": ("on", True),
                  "pollTimeout": ("0", 0.5), "maxAttempts": ("4", 4), "writeAheadLocation": ("/w", "/w"),
                  "max_in_flight_bytes": ("1000", 1000), "idle_timeout": ("0", 0.0),
                  "lookupd_poll_interval": ("1500", 1.5), "subscribePattern": ("t.*", "t.*"),
                  "startingOffsets": ("Latest", "latest"), "endingTimestamp": ("1700000000000", 1700000000000 * 10**6),
                  "minBatchesToRetain": ("3", 3), "failOnDataLoss": ("off", False)},
    WriteOptions: {"mpub_max_messages": ("9", 9), "mpub_max_bytes": ("99", 99), "mpub_window": ("1", 1)},
    ConnectOptions: {"nsqd_tcp_addresses": ("h:1, h:2", ("h:1", "h:2")),
                     "nsqd_http_addresses": ("h:3,h:4", ("h:3", "h:4")), "lookupd_http_addresses": ("", ()),
                     "connect_timeout": ("0", 5.0), "tls": ("yes", True),
                     "tls_ca_file": ("ca", "ca"), "tls_cert_file": ("", None), "tls_key_file": ("k", "k"),
                     "tls_insecure_skip_verify": ("1", True), "tls_server_name": ("n", "n"), "snappy": ("0", False),
                     "deflate": ("true", True), "deflate_level": ("9", 9), "auth_secret": ("s", "s"),
                     "msg_timeout": ("1m", 60.0), "client_id": ("q", "q"), "hostname": ("w", "w"),
                     "heartbeat_interval": ("-1", -1), "output_buffer_timeout": ("100", 100),
                     "sample_rate": ("0", 0)},
}


@pytest.mark.parametrize("cls", list(DECLARED))
def test_declared_options_are_read_into_their_fields(cls: type) -> None:
    declared = {f.name: f.metadata["option"][0] for f in fields(cls) if "option" in f.metadata}
    assert set(declared.values()) == set(DECLARED[cls])  # a new option needs a row here
    given = {key.upper(): text for key, (text, _) in DECLARED[cls].items()}  # Spark's keys are case-insensitive
    base = {"channel": "c", "nsqd_tcp_addresses": "h:1"}  # the topics come from subscribePattern
    if cls is WriteOptions:
        base["topic"] = "t"
    if cls is ConnectOptions:  # read and write hand it the map with its keys lower-cased
        parsed = ConnectOptions.parse({key.lower(): text for key, text in given.items()})
    else:
        parsed = cls.parse({**base, **given})
    assert {name: getattr(parsed, name) for name in declared} == {
        name: DECLARED[cls][key][1] for name, key in declared.items()}


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
    reader = DriverStreamReader(read_options(nsqd, topic, max_messages_per_batch="100"))
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
    with running(read_options(nsqd, topic, max_in_flight_bytes="1000"), max_in_flight=30) as consumer:
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
    with running(read_options(nsqd, topic, msg_timeout="1s"), max_in_flight=10) as consumer:
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
    opts = ReadOptions.parse({"topic": "t", "channel": "c", "nsqd_tcp_addresses": f"127.0.0.1:{free_port()}"})
    with pytest.raises(NSQConnectionError, match=r"could not subscribe on any of .*refused"):
        Consumer(opts, max_in_flight=10).start()


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
