"""The driver's planning against real nsqd (and nsqlookupd) processes, without Spark except for one availableNow run:
when availableNow is done, fair and bounded quotas, a survey that one dead node cannot stall, the default partitions,
subscribePattern, startingOffsets and endingTimestamp. Batches run as Spark would run them: latestOffset, then every
partition's `read` (the executor task, in this process), then commit."""

from __future__ import annotations

import itertools
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from pyspark.sql import SparkSession

from nsqd_py.client.connection import Connection
from nsqd_py.client.http import lookup_producers
from nsqd_py.client.protocol import Message
from nsqd_py.spark.options import OptionError, ReadOptions
from nsqd_py.spark.planner import ChannelState, UnreachableError, plan_slices
from nsqd_py.spark.reader import NSQStreamReader
from nsqd_py.testing import free_port
from tests.cluster.util import LookupdProcess
from tests.spark.util import hold_in_flight, http_address, publish
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_rdy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsqdProcess]:
    """An nsqd whose max RDY of 5 lets a task see only 5 messages at a time."""
    proc = NsqdProcess(tmp_path_factory.mktemp("small-rdy"), "--max-rdy-count=5").start()
    yield proc
    proc.stop()


@pytest.fixture
def lookupd(tmp_path: Path) -> Iterator[LookupdProcess]:
    proc = LookupdProcess(tmp_path).start()
    yield proc
    proc.stop()


@pytest.fixture
def blackhole() -> Iterator[str]:
    """An address that accepts connections and never answers (an nsqd that hangs)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def reader_for(nsqd: NsqdProcess, location: Path, **extra: str) -> NSQStreamReader:
    return NSQStreamReader(ReadOptions.parse({
        "channel": "c", "nsqdTcpAddresses": nsqd.tcp_address, "nsqdHttpAddresses": http_address(nsqd),
        "pollTimeout": "300ms", "writeAheadLocation": str(location), **extra}))


def run_batch(reader: NSQStreamReader, start: dict) -> tuple[dict, list[tuple[str, bytes]]]:
    """One micro-batch as Spark runs it: plan, read every partition, commit. (topic, body) of every row."""
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    if end == start:
        return end, []
    rows = [(topic, body) for part in reader.partitions(start, end) for batch in reader.read(part)
            for topic, body in zip(batch.column("topic").to_pylist(), batch.column("body").to_pylist(), strict=True)]
    reader.commit(end)
    return end, rows


def read_available_now(reader: NSQStreamReader, max_batches: int = 10) -> list[bytes]:
    """trigger(availableNow=True): the bodies of every batch until the reader has nothing more."""
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    got: list[bytes] = []
    for _ in range(max_batches):
        end, rows = run_batch(reader, start)
        if end == start:
            return got
        got += [body for _, body in rows]
        start = end
    raise AssertionError(f"availableNow did not end within {max_batches} batches")


def bodies(count: int, prefix: str) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def hand_back(conn: Connection, taken: list[Message]) -> None:
    for msg in taken:
        conn.req(msg.id)
    conn.nop()
    conn.close()


# -- what nsqd counts ----------------------------------------------------------------------------------------------


def test_nsqd_counts_messages_put_into_a_channel_not_requeues_or_timeouts(nsqd: NsqdProcess,
                                                                          name: Callable[[str], str]) -> None:
    """availableNow's end rests on this (Go's nsqd: PutMessage and PutMessageDeferred count, doRequeue does not)."""
    topic = name("count")
    requests.post(f"{nsqd.http_url}/channel/create", params={"topic": topic, "channel": "c"}, timeout=5)
    publish(nsqd, topic, bodies(3, "m"))
    with Connection(nsqd.tcp_address).connect() as conn:
        conn.identify(msg_timeout=1000)
        conn.sub(topic, "c")
        conn.rdy(3)
        first, second, _ = (conn.read_frame(5) for _ in range(3))
        conn.rdy(0)
        assert isinstance(first, Message) and isinstance(second, Message)
        conn.req(first.id)
        conn.fin(second.id)
        wait_until(lambda: channel_stats(nsqd, topic, "c")["timeout_count"] == 1, timeout=5)  # the third timed out
    requests.post(f"{nsqd.http_url}/pub", params={"topic": topic, "defer": "60000"}, data=b"later", timeout=5)
    stats = channel_stats(nsqd, topic, "c")
    assert (stats["message_count"], stats["requeue_count"], stats["deferred_count"]) == (4, 1, 1)
    assert stats["depth"] + stats["in_flight_count"] + stats["deferred_count"] == 3


# -- scenario 6: when availableNow is done -------------------------------------------------------------------------


def test_an_empty_batch_does_not_end_available_now_while_older_messages_wait_behind_newer(
        small_rdy: NsqdProcess, tmp_path: Path) -> None:
    """Older messages requeued behind newer ones: a task's RDY window fills with newer messages it must hold back,
    so a batch reads nothing although the older ones are still there."""
    topic = "behind"
    requests.post(f"{small_rdy.http_url}/channel/create", params={"topic": topic, "channel": "c"}, timeout=5)
    publish(small_rdy, topic, bodies(3, "early"))
    conn, taken = hold_in_flight(small_rdy, topic, 3)
    reader = reader_for(small_rdy, tmp_path, subscribe=topic)
    reader.prepareForTriggerAvailableNow()
    publish(small_rdy, topic, bodies(10, "late"))
    hand_back(conn, taken)  # the early ones go behind the late ones
    wait_until(lambda: channel_stats(small_rdy, topic, "c")["depth"] == 13)
    start = reader.initialOffset()
    got: list[bytes] = []
    for _ in range(10):
        end, rows = run_batch(reader, start)
        if end == start:
            break
        got += [body for _, body in rows]
        start = end
    assert sorted(got) == sorted(bodies(3, "early"))
    wait_until(lambda: channel_stats(small_rdy, topic, "c")["in_flight_count"] == 0)
    assert channel_stats(small_rdy, topic, "c")["depth"] == 10  # the late ones stay


def test_available_now_waits_for_older_messages_in_flight_elsewhere(nsqd: NsqdProcess, name: Callable[[str], str],
                                                                   tmp_path: Path) -> None:
    """Older messages another consumer (or a killed task) holds come back after its msg_timeout: availableNow waits
    for them instead of ending with the channel empty."""
    topic = name("inflight")
    requests.post(f"{nsqd.http_url}/channel/create", params={"topic": topic, "channel": "c"}, timeout=5)
    publish(nsqd, topic, bodies(4, "early"))
    conn, taken = hold_in_flight(nsqd, topic, 4)
    released = threading.Timer(1.5, hand_back, (conn, taken))
    released.start()
    try:
        assert sorted(read_available_now(reader_for(nsqd, tmp_path, subscribe=topic))) == sorted(bodies(4, "early"))
    finally:
        released.join()


def test_available_now_reads_a_topics_backlog_that_moves_into_the_new_channel(nsqd: NsqdProcess,
                                                                             name: Callable[[str], str],
                                                                             tmp_path: Path) -> None:
    """A topic without the channel yet: the survey creates it and the topic's backlog moves in; those messages are
    older than the cutoff and are read."""
    topic = name("backlog")
    publish(nsqd, topic, bodies(6, "early"))
    reader = reader_for(nsqd, tmp_path, subscribe=topic)
    assert sorted(read_available_now(reader)) == sorted(bodies(6, "early"))
    assert reader.reportLatestOffset()["beforeCutoff"] == 0


def test_available_now_fails_while_lookupd_does_not_answer(tmp_path: Path) -> None:
    reader = NSQStreamReader(ReadOptions.parse({
        "subscribe": "t", "channel": "c", "lookupdHttpAddresses": f"127.0.0.1:{free_port()}",
        "connectTimeout": "1s", "writeAheadLocation": str(tmp_path)}))
    with pytest.raises(UnreachableError, match="lookupd"):
        read_available_now(reader)


def test_ending_timestamp_reads_what_was_published_up_to_it(nsqd: NsqdProcess, name: Callable[[str], str],
                                                           tmp_path: Path) -> None:
    topic = name("ending")
    publish(nsqd, topic, bodies(3, "early"))
    time.sleep(0.05)
    ending = datetime.now(UTC)
    time.sleep(0.05)
    publish(nsqd, topic, bodies(2, "late"))
    reader = reader_for(nsqd, tmp_path, subscribe=topic, endingTimestamp=ending.isoformat())
    assert sorted(read_available_now(reader)) == sorted(bodies(3, "early"))
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0)
    assert channel_stats(nsqd, topic, "c")["depth"] == 2

    later = reader_for(nsqd, tmp_path, subscribe=topic, endingTimestamp=str(int(time.time() * 1000) + 3_600_000))
    later.prepareForTriggerAvailableNow()  # an ending after the start is the start
    publish(nsqd, topic, bodies(2, "after"))
    start = later.initialOffset()
    end, rows = run_batch(later, start)
    assert sorted(body for _, body in rows) == sorted(bodies(2, "late"))
    assert run_batch(later, end)[0] == end

    with pytest.raises(OptionError, match="availableNow"):
        streaming = reader_for(nsqd, tmp_path, subscribe=topic, endingTimestamp="0")
        streaming.latestOffset(streaming.initialOffset(), streaming.getDefaultReadLimit())


# -- scenario 8: quotas, starvation, the survey's timeout -------------------------------------------------------------


def test_quotas_never_exceed_depth() -> None:
    states = [ChannelState("a", "n:1", 3), ChannelState("b", "n:1", 2), ChannelState("c", "n:1", 1)]
    assert sorted(s.quota for s in plan_slices(states, 5, None, None)) == [1, 2, 2]
    for depths in itertools.product(range(4), repeat=3):
        states = [ChannelState(topic, "n:1", depth) for topic, depth in zip("abc", depths, strict=True)]
        for limit, partitions in itertools.product(range(1, 10), (None, 1, 2, 5)):
            quotas: dict[str, int] = {}
            for spec in plan_slices(states, limit, None, partitions):
                quotas[spec.topic] = quotas.get(spec.topic, 0) + spec.quota
                assert spec.quota > 0
            assert all(quotas.get(s.topic, 0) <= s.depth for s in states), (depths, limit, partitions, quotas)
            assert sum(quotas.values()) == min(limit, sum(depths))


def test_no_topic_starves_when_a_batch_is_smaller_than_the_topics(nsqd: NsqdProcess, name: Callable[[str], str],
                                                                   tmp_path: Path) -> None:
    topics = [name(f"fair{i}") for i in range(5)]
    reader = reader_for(nsqd, tmp_path, subscribe=",".join(topics), maxOffsetsPerTrigger="2")
    start = reader.initialOffset()
    reader.latestOffset(start, reader.getDefaultReadLimit())  # creates the channels
    for topic, count in zip(topics, [50, 50, 1, 1, 1], strict=True):  # two big topics, three small ones
        publish(nsqd, topic, bodies(count, topic))
    read: set[str] = set()
    for _ in range(math.ceil(len(topics) / 2)):
        start, rows = run_batch(reader, start)
        assert len(rows) == 2
        read.update(topic for topic, _ in rows)
    assert read == set(topics)


def test_one_dead_nsqd_costs_one_timeout_per_survey(nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path,
                                                    blackhole: str) -> None:
    topics = [name(f"dead{i}") for i in range(4)]
    for topic in topics:
        publish(nsqd, topic, bodies(1, topic))
    reader = NSQStreamReader(ReadOptions.parse({
        "subscribe": ",".join(topics), "channel": "c", "nsqdTcpAddresses": f"{nsqd.tcp_address},{blackhole}",
        "nsqdHttpAddresses": f"{http_address(nsqd)},{blackhole}", "connectTimeout": "1s",
        "writeAheadLocation": str(tmp_path)}))
    start = reader.initialOffset()
    began = time.monotonic()
    reader.latestOffset(start, reader.getDefaultReadLimit())  # creates the channels
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert time.monotonic() - began < 3.5  # two surveys of about 1 s each, not 4 topics x 5 s each
    assert {spec[0] for spec in end["slices"]} == set(topics)
    assert reader.reportLatestOffset()["unreachable"] == [blackhole]


# -- scenario 9: defaults -----------------------------------------------------------------------------------------


def test_a_wrong_guessed_http_port_fails_at_start_naming_the_option(nsqd: NsqdProcess, name: Callable[[str], str],
                                                                    tmp_path: Path) -> None:
    if nsqd.http_port == nsqd.tcp_port + 1:
        pytest.skip("this nsqd's HTTP port is its TCP port + 1")
    reader = NSQStreamReader(ReadOptions.parse({"subscribe": name("port"), "channel": "c",
                                                "nsqdTcpAddresses": nsqd.tcp_address,
                                                "writeAheadLocation": str(tmp_path)}))
    with pytest.raises(OptionError, match="nsqdHttpAddresses"):
        reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())


def test_default_partitions_are_the_cores_spread_over_the_nsqd(nsqd: NsqdProcess, name: Callable[[str], str],
                                                               tmp_path: Path) -> None:
    topic = name("cores")
    reader = reader_for(nsqd, tmp_path, subscribe=topic)
    start = reader.initialOffset()
    reader.latestOffset(start, reader.getDefaultReadLimit())  # creates the channel
    publish(nsqd, topic, bodies(100, "m"))
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert len(end["slices"]) == len(os.sched_getaffinity(0))
    assert sum(spec[3] for spec in end["slices"]) == 100


# -- Kafka's subscribePattern and startingOffsets -------------------------------------------------------------------


def test_subscribe_pattern_reads_matching_topics_and_those_that_appear_later(nsqd: NsqdProcess,
                                                                            name: Callable[[str], str],
                                                                            tmp_path: Path) -> None:
    prefix = name("pat")
    publish(nsqd, f"{prefix}_a", bodies(3, "a"))
    publish(nsqd, f"{prefix}_b", bodies(2, "b"))
    publish(nsqd, f"{prefix}x_other", bodies(4, "other"))
    reader = reader_for(nsqd, tmp_path, subscribePattern=f"{re.escape(prefix)}_(a|b|c)")
    start = reader.initialOffset()
    reader.latestOffset(start, reader.getDefaultReadLimit())  # creates the channels: the backlogs move in
    start, rows = run_batch(reader, start)
    assert sorted(body for _, body in rows) == sorted(bodies(3, "a") + bodies(2, "b"))
    publish(nsqd, f"{prefix}_c", bodies(2, "c"))
    reader.latestOffset(start, reader.getDefaultReadLimit())  # the new topic's channel
    _, rows = run_batch(reader, start)
    assert sorted(rows) == sorted((f"{prefix}_c", body) for body in bodies(2, "c"))
    assert not nsqd.stats(topic=f"{prefix}x_other")["topics"][0]["channels"]  # no channel made where none matched


def test_subscribe_pattern_through_lookupd_and_a_lookupd_that_does_not_answer(
        lookupd: LookupdProcess, nsqd_factory: Callable[..., NsqdProcess], name: Callable[[str], str],
        tmp_path: Path) -> None:
    node = nsqd_factory("--broadcast-address=127.0.0.1", f"--lookupd-tcp-address={lookupd.tcp_address}")
    prefix, dead = name("lk"), f"127.0.0.1:{free_port()}"
    publish(node, f"{prefix}_a", bodies(3, "a"))
    publish(node, f"{prefix}_skip", bodies(1, "skip"))
    wait_until(lambda: lookup_producers(lookupd.http_address, f"{prefix}_a"))
    options = {"subscribePattern": f"{re.escape(prefix)}_a", "channel": "c", "connectTimeout": "1s",
               "lookupdHttpAddresses": f"{lookupd.http_address},{dead}", "writeAheadLocation": str(tmp_path)}
    reader = NSQStreamReader(ReadOptions.parse(options))
    start = reader.initialOffset()
    reader.latestOffset(start, reader.getDefaultReadLimit())  # creates the channel
    _, rows = run_batch(reader, start)
    assert sorted(body for _, body in rows) == sorted(bodies(3, "a"))
    assert reader.reportLatestOffset()["unreachable"] == [dead]
    strict = NSQStreamReader(ReadOptions.parse({**options, "failOnUnreachable": "true"}))
    with pytest.raises(UnreachableError, match=dead):
        strict.latestOffset(strict.initialOffset(), strict.getDefaultReadLimit())


def test_starting_offsets_latest_skips_the_backlog_once(nsqd: NsqdProcess, name: Callable[[str], str],
                                                        tmp_path: Path) -> None:
    with_channel, without = name("latest"), name("latest_new")
    requests.post(f"{nsqd.http_url}/channel/create", params={"topic": with_channel, "channel": "c"}, timeout=5)
    publish(nsqd, with_channel, bodies(5, "old"))
    publish(nsqd, without, bodies(4, "old"))  # no channel yet: its backlog moves into the new one
    reader = reader_for(nsqd, tmp_path, subscribe=f"{with_channel},{without}", startingOffsets="latest")
    start = reader.initialOffset()
    for topic in (with_channel, without):
        assert channel_stats(nsqd, topic, "c")["depth"] == 0
    publish(nsqd, with_channel, bodies(3, "new"))
    reader.initialOffset()  # Spark asks again on every trigger until the first batch: no second skip
    _, rows = run_batch(reader, start)
    assert sorted(body for _, body in rows) == sorted(bodies(3, "new"))


# -- one run in Spark ---------------------------------------------------------------------------------------------


def test_spark_available_now_waits_for_messages_in_flight_at_its_start(spark: SparkSession, nsqd: NsqdProcess,
                                                                       name: Callable[[str], str],
                                                                       tmp_path: Path) -> None:
    """Spark ends availableNow when latestOffset returns its start: the source blocks there instead while older
    messages are in flight elsewhere, and the query ends once it read them all."""
    topic = name("spark_now")
    requests.post(f"{nsqd.http_url}/channel/create", params={"topic": topic, "channel": "c"}, timeout=5)
    publish(nsqd, topic, bodies(20, "early"))
    conn, taken = hold_in_flight(nsqd, topic, 5)

    def release_after_the_first_batch() -> None:
        wait_until(lambda: channel_stats(nsqd, topic, "c")["depth"] == 0, timeout=60)
        time.sleep(2)
        hand_back(conn, taken)

    released = threading.Thread(target=release_after_the_first_batch)
    released.start()
    table = name("now").replace(".", "_")
    query = (spark.readStream.format("nsq").option("subscribe", topic).option("channel", "c")
             .option("nsqdTcpAddresses", nsqd.tcp_address).option("nsqdHttpAddresses", http_address(nsqd))
             .option("writeAheadLocation", str(tmp_path / "wa")).load()
             .writeStream.format("memory").queryName(table).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(90)
    finally:
        released.join()
    got = sorted(bytes(row.body) for row in spark.sql(f"SELECT body FROM {table}").collect())
    assert got == sorted(bodies(20, "early"))
