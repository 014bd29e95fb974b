"""trigger(availableNow=True) at its edges (issue 38, case 11): an nsqd whose clock is off the driver's, paused
topics and channels, and `query.stop()` while the source waits for messages in flight elsewhere.

Batches run as Spark runs them (latestOffset, every partition's `read` in this process, commit), against real nsqd
processes; the nsqd with a skewed clock runs under Debian's libfaketime (`make faketime-deps`)."""

from __future__ import annotations

import email.utils
import glob
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from pyspark.sql import SparkSession

from nsqd_py.client.connection import Connection
from nsqd_py.client.protocol import Message
from nsqd_py.spark.clocks import clock_offsets
from nsqd_py.spark.options import ConnectOptions, ReadOptions
from nsqd_py.spark.reader import NSQStreamReader
from tests.spark.util import bodies, hold_in_flight, http_address, publish, topic_depth
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow

#: Debian's libfaketime: preloaded, it shifts the clock the process reads (time.time, and so nsqd's message
#: timestamps and its Date header); the monotonic clock stays, so gevent's timers are unaffected
FAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), "")
HOUR_NS = 3600 * 1_000_000_000


class SkewedNsqd(NsqdProcess):
    """An nsqd whose clock reads ``shift`` (libfaketime's notation, `-1h`) off the host's."""

    def __init__(self, data_path: Path, shift: str) -> None:
        super().__init__(data_path)
        self.shift = shift

    def command(self) -> list[str]:
        return ["env", f"LD_PRELOAD={FAKETIME}", f"FAKETIME={self.shift}", "FAKETIME_DONT_FAKE_MONOTONIC=1",
                *super().command()]


@pytest.fixture(scope="module", params=[("-1h", -HOUR_NS), ("+1h", HOUR_NS)], ids=["behind", "ahead"])
def skewed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkewedNsqd]:
    assert FAKETIME, "libfaketime is missing: run `make faketime-deps`"
    shift, shift_ns = request.param
    proc = SkewedNsqd(tmp_path_factory.mktemp("skewed"), shift).start()
    try:
        date = requests.get(f"{proc.http_url}/ping", timeout=5).headers["Date"]
        seconds_off = email.utils.parsedate_to_datetime(date).timestamp() - time.time()
        assert abs(seconds_off * 1e9 - shift_ns) < 5e9, f"nsqd's clock is {seconds_off:.0f} s off, not {shift}"
        yield proc
    finally:
        proc.stop()


def reader_for(nsqd: NsqdProcess, location: Path, topic: str) -> NSQStreamReader:
    return NSQStreamReader(ReadOptions.parse({
        "subscribe": topic, "channel": "c", "nsqdTcpAddresses": nsqd.tcp_address,
        "nsqdHttpAddresses": http_address(nsqd), "pollTimeout": "300ms", "writeAheadLocation": str(location)}))


def run_batch(reader: NSQStreamReader, start: dict) -> tuple[dict, list[bytes]]:
    """One micro-batch as Spark runs it: plan, read every partition, commit; the bodies it read."""
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    if end == start:
        return end, []
    got = [body for part in reader.partitions(start, end) for batch in reader.read(part)
           for body in batch.column("body").to_pylist()]
    reader.commit(end)
    return end, got


def run_until_done(reader: NSQStreamReader, start: dict, max_batches: int = 8) -> list[bytes]:
    """The batches that follow ``start`` until latestOffset has nothing more (Spark then ends availableNow)."""
    got: list[bytes] = []
    for _ in range(max_batches):
        end, rows = run_batch(reader, start)
        if end == start:
            return got
        got += rows
        start = end
    raise AssertionError(f"availableNow did not end within {max_batches} batches (it read {len(got)} rows)")


def read_available_now(reader: NSQStreamReader) -> list[bytes]:
    reader.prepareForTriggerAvailableNow()
    return run_until_done(reader, reader.initialOffset())


def create_channel(nsqd: NsqdProcess, topic: str) -> None:
    """``topic`` and its channel `c`, so that what is published from now on is kept for the channel."""
    for path, params in (("/topic/create", {"topic": topic}), ("/channel/create", {"topic": topic, "channel": "c"})):
        requests.post(f"{nsqd.http_url}{path}", params=params, timeout=5).raise_for_status()


def hand_back(conn: Connection, taken: list[Message]) -> None:
    for msg in taken:
        conn.req(msg.id)
    conn.nop()
    conn.close()


# -- an nsqd whose clock is off the driver's ----------------------------------------------------------------------


def test_the_driver_reads_each_nsqds_clock_within_its_bounds(skewed: SkewedNsqd) -> None:
    """The offset read from the Date header brackets the true shift (libfaketime's exact hour)."""
    offset = clock_offsets({skewed.tcp_address: http_address(skewed)}, ConnectOptions())[skewed.tcp_address]
    shift_ns = -HOUR_NS if skewed.shift.startswith("-") else HOUR_NS
    assert offset.low <= shift_ns <= offset.high


def test_available_now_reads_exactly_the_older_messages_whatever_nsqds_clock(skewed: SkewedNsqd,
                                                                             name: Callable[[str], str],
                                                                             tmp_path: Path) -> None:
    """Older messages, some in the channel and some in flight elsewhere; newer ones published after the start.

    Before: the cutoff was the driver's clock, compared with nsqd's timestamps. An nsqd an hour behind stamped the
    newer messages as older: the first batch read them, the count of older messages pending reached 0, and the run
    ended with the older messages in flight left behind (and newer ones read). An nsqd an hour ahead stamped the
    older messages as newer: every task handed them back, and the run never ended. After: each nsqd gets the cutoff
    on its own clock, read from its Date header; the run reads exactly the older messages and leaves the newer."""
    topic = name("skew")
    create_channel(skewed, topic)
    publish(skewed, topic, bodies(3, "away"))
    conn, taken = hold_in_flight(skewed, topic, 3)
    publish(skewed, topic, bodies(2, "early"))
    reader = reader_for(skewed, tmp_path, topic)
    reader.prepareForTriggerAvailableNow()
    publish(skewed, topic, bodies(5, "late"))
    start = reader.initialOffset()
    start, got = run_batch(reader, start)
    hand_back(conn, taken)  # the older ones come back, behind the newer ones
    got += run_until_done(reader, start)
    assert sorted(got) == sorted(bodies(3, "away") + bodies(2, "early"))
    wait_until(lambda: channel_stats(skewed, topic, "c")["in_flight_count"] == 0)
    assert channel_stats(skewed, topic, "c")["depth"] == 5  # the newer ones stay for the next run


# -- paused topics and channels -----------------------------------------------------------------------------------


def test_available_now_leaves_a_paused_topics_queue_for_a_later_run(nsqd: NsqdProcess, name: Callable[[str], str],
                                                                   tmp_path: Path) -> None:
    """Before: the channel's state counted the paused topic's queue as readable, so after the channel's own
    messages every trigger planned a batch whose tasks got nothing: empty batches without end. After: a paused
    topic's queue is neither planned nor waited for; the run reads what the channel can deliver and ends (with a
    warning), and the run after the topic is resumed reads the rest."""
    topic = name("paused_topic")
    create_channel(nsqd, topic)
    publish(nsqd, topic, bodies(3, "delivered"))
    wait_until(lambda: channel_stats(nsqd, topic, "c")["depth"] == 3)
    requests.post(f"{nsqd.http_url}/topic/pause", params={"topic": topic}, timeout=5).raise_for_status()
    publish(nsqd, topic, bodies(4, "held"))
    reader = reader_for(nsqd, tmp_path / "first", topic)
    assert sorted(read_available_now(reader)) == sorted(bodies(3, "delivered"))
    assert reader.reportLatestOffset()["beforeCutoff"] == 4  # the progress shows what the pause keeps
    assert topic_depth(nsqd, topic) == 4

    requests.post(f"{nsqd.http_url}/topic/unpause", params={"topic": topic}, timeout=5).raise_for_status()
    assert sorted(read_available_now(reader_for(nsqd, tmp_path / "second", topic))) == sorted(bodies(4, "held"))


def test_available_now_ends_at_a_paused_channel(nsqd: NsqdProcess, name: Callable[[str], str],
                                               tmp_path: Path) -> None:
    """Before: latestOffset waited for a paused channel's messages, a second at a time, for as long as the pause
    lasted (a forgotten pause: forever). After: the run ends at once, reading nothing, and leaves them."""
    topic = name("paused_channel")
    create_channel(nsqd, topic)
    publish(nsqd, topic, bodies(3, "held"))
    params = {"topic": topic, "channel": "c"}
    requests.post(f"{nsqd.http_url}/channel/pause", params=params, timeout=5).raise_for_status()
    assert read_available_now(reader_for(nsqd, tmp_path, topic)) == []
    assert channel_stats(nsqd, topic, "c")["depth"] == 3


# -- query.stop() while the source waits ----------------------------------------------------------------------------


def test_query_stop_returns_while_available_now_waits_for_messages_in_flight(spark: SparkSession, nsqd: NsqdProcess,
                                                                             name: Callable[[str], str],
                                                                             tmp_path: Path) -> None:
    """The source waits inside latestOffset while the messages from before its start are in flight elsewhere: here
    for ten minutes, another consumer's msg_timeout. Checked, and the same before and after: `query.stop()` returns
    at once, because Spark reads the source's answers through an interruptible channel and then kills its Python
    process; the query ends without an error, and nothing is lost (the source holds nothing while it waits)."""
    topic = name("stop_waiting")
    create_channel(nsqd, topic)
    publish(nsqd, topic, bodies(3, "away"))
    holder = Connection(nsqd.tcp_address).connect()
    holder.identify(msg_timeout=600_000)
    holder.sub(topic, "c")
    holder.rdy(3)
    taken = [holder.read_frame(5) for _ in range(3)]
    holder.rdy(0)
    assert all(isinstance(m, Message) for m in taken)
    try:
        query = (spark.readStream.format("nsq").option("subscribe", topic).option("channel", "c")
                 .option("nsqdTcpAddresses", nsqd.tcp_address).option("nsqdHttpAddresses", http_address(nsqd))
                 .option("writeAheadLocation", str(tmp_path / "wa")).load()
                 .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        wait_until(lambda: query.status["message"].startswith("Getting offsets"), timeout=60)
        time.sleep(2)  # the source has looked at least once, found only messages in flight, and sleeps
        assert query.isActive and query.lastProgress is None  # no batch: it is waiting
        stopper = threading.Thread(target=query.stop, daemon=True)
        stopper.start()
        stopper.join(60)  # the wait would last ten minutes
        assert not stopper.is_alive()
        assert not query.isActive and query.exception() is None
    finally:
        hand_back(holder, taken)  # type: ignore[arg-type]
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0)
    assert channel_stats(nsqd, topic, "c")["depth"] == 3
