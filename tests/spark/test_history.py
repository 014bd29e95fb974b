"""Reading history (issue 46 item 3, issue 48's last bullet and case 8): with retention on, startingOffsets=earliest,
startingTimestamp and startingOffsetsByTimestamp start a new query's channel in the topic's retained log, as Kafka's
source starts at its earliest offsets or at a time; failOnDataLoss when the start was trimmed; unretained topics as
before; a user schema refused. Against real Spark and a real nsqd with retention (per topic) and small segments."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.reader import NSQStreamReader
from nsqd_py.spark.schema import ARROW_SCHEMA
from nsqd_py.spark.slice_task import SliceTask
from tests.spark.util import bodies, publish, source_options
from tests.support import NsqdProcess, find_channel, wait_until

pytestmark = pytest.mark.slow

#: segments of 4 KiB: a topic kept to 8 KiB trims its oldest messages after a few dozen publishes
SEGMENT = 4096


@pytest.fixture(scope="module")
def retaining(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsqdProcess]:
    proc = NsqdProcess(tmp_path_factory.mktemp("history-nsqd"), f"--max-bytes-per-file={SEGMENT}").start()
    yield proc
    proc.stop()


def retain(nsqd: NsqdProcess, topic: str, **settings: str) -> None:
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    query = "&".join(f"{key}={value}" for key, value in (settings or {"topic_retention": "1h"}).items())
    reply = nsqd.request("POST", f"/topic/settings?topic={topic}&{query}")
    assert reply.status == 200, reply


def consumed_elsewhere(nsqd: NsqdProcess, topic: str, count: int, prefix: str) -> list[bytes]:
    """Publish ``count`` messages while another channel exists: they go to it, not to the topic's own queue, so a
    channel made later gets them only from the retained log."""
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=other").status == 200
    sent = bodies(count, prefix)
    publish(nsqd, topic, sent)
    wait_until(lambda: nsqd.stats(topic=topic)["topics"][0]["depth"] == 0)
    return sent


def run(spark: SparkSession, nsqd: NsqdProcess, topic: str, tmp_path: Path, **extra: str) -> list[bytes]:
    """One availableNow run of a query on channel c (its checkpoint and output in ``tmp_path``); every body the
    output holds so far, sorted."""
    stream = (spark.readStream.format("nsq")
              .options(**source_options(nsqd, topic, writeAheadLocation=str(tmp_path / "wal"), **extra)).load())
    query = (stream.select("body").writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    if query.exception() is not None:
        raise AssertionError(str(query.exception()))
    return sorted(bytes(row.body) for row in spark.read.parquet(str(tmp_path / "out")).collect())


def failure(spark: SparkSession, nsqd: NsqdProcess, topic: str, tmp_path: Path, **extra: str) -> str:
    with pytest.raises(Exception) as caught:
        run(spark, nsqd, topic, tmp_path, **extra)
    return str(caught.value)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- earliest and a start time ------------------------------------------------------------------------------------

def test_earliest_reads_the_history_published_before_the_query_started(
        spark: SparkSession, retaining: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """Before: the query's new channel got nothing of the 30 messages another channel had taken; after: it replays
    them, then reads what comes next once (a restart on the checkpoint does not apply the start again)."""
    topic = name("history_earliest")
    retain(retaining, topic)
    old = consumed_elsewhere(retaining, topic, 30, "old")
    assert run(spark, retaining, topic, tmp_path, startingOffsets="earliest", maxOffsetsPerTrigger="8") == sorted(old)
    new = bodies(5, "new")
    publish(retaining, topic, new)
    assert run(spark, retaining, topic, tmp_path, startingOffsets="earliest") == sorted(old + new)


def test_a_start_time_reads_from_that_time_on(
        spark: SparkSession, retaining: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """Before: startingTimestamp was not an option and the channel began empty; after: exactly the messages from
    the time on, also by startingOffsetsByTimestamp."""
    topic = name("history_time")
    retain(retaining, topic)
    consumed_elsewhere(retaining, topic, 10, "before")
    time.sleep(0.05)
    at = now_ms()
    time.sleep(0.05)
    after = bodies(10, "after")
    publish(retaining, topic, after)
    assert run(spark, retaining, topic, tmp_path / "a", startingTimestamp=str(at)) == sorted(after)
    assert run(spark, retaining, topic, tmp_path / "b", channel="by_topic",
               startingOffsetsByTimestamp=f'{{"{topic}": {at}}}') == sorted(after)


def test_a_replayed_batch_of_history_reads_the_same_rows(
        retaining: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """A batch of replayed history run twice (a retried task, a restarted driver) reads the same rows the second
    time: from the write-ahead location, as any batch."""
    topic = name("history_exact")
    retain(retaining, topic)
    old = consumed_elsewhere(retaining, topic, 20, "old")
    reader = NSQStreamReader(ReadOptions.parse(source_options(retaining, topic, writeAheadLocation=str(tmp_path),
                                                              maxOffsetsPerTrigger="12", minPartitions="2")))
    start = reader.initialOffset()
    end = wait_until(lambda: (lambda e: e if e != start else None)(reader.latestOffset(start,
                                                                                       reader.getDefaultReadLimit())))

    def rows() -> list[bytes]:
        tables = [pa.Table.from_batches(list(SliceTask(p.plan, reader.opts, None).run()), ARROW_SCHEMA)
                  for p in reader.partitions(start, end)]
        return sorted(body for table in tables for body in table.column("body").to_pylist())

    first = rows()
    assert first and set(first) <= set(old)
    assert rows() == first


# -- failOnDataLoss: a start already trimmed ----------------------------------------------------------------------

def trimmed_topic(nsqd: NsqdProcess, topic: str) -> tuple[int, list[bytes]]:
    """A topic kept to 8 KiB whose oldest messages retention has removed: the time before them, and all sent."""
    retain(nsqd, topic, topic_retention_bytes=str(2 * SEGMENT))
    at = now_ms()
    time.sleep(0.05)
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=other").status == 200
    sent = bodies(600, "m")  # ~21 KiB of records (35 B each), an MPUB of 30 at a time: 5 segments
    for i in range(0, len(sent), 30):
        publish(nsqd, topic, sent[i:i + 30])
    wait_until(lambda: not (nsqd.data_path / f"{topic}.retained.000001.dat").exists(), timeout=20,
               what="retention trimmed the first segment")
    return at, sent


def test_a_start_time_already_trimmed_fails_the_query_unless_told_otherwise(
        spark: SparkSession, retaining: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """Before: no start time, no failure; after: failOnDataLoss=true fails the query naming the trim (and the
    restarted query fails again: the channel was not left replaying), false reads the retained rest with a
    warning."""
    topic = name("history_trimmed")
    at, sent = trimmed_topic(retaining, topic)
    for attempt in ("first", "restart"):
        message = failure(spark, retaining, topic, tmp_path / "strict", startingTimestamp=str(at))
        assert "trimmed by retention" in message and "failOnDataLoss=false" in message, (attempt, message)
        assert find_channel(retaining, topic, "c") is None
    read = run(spark, retaining, topic, tmp_path / "lenient", startingTimestamp=str(at), failOnDataLoss="false")
    assert 0 < len(read) < len(sent) and set(read) <= set(sent)
    newest = sorted(sent, key=lambda body: int(body.split(b"-")[1]))
    assert sorted(read) == sorted(newest[-len(read):])  # the newest ones, none missing in between


# -- unretained topics, as before ---------------------------------------------------------------------------------

def test_an_unretained_topic_reads_as_before_and_refuses_a_start_time(
        spark: SparkSession, retaining: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """earliest reads what waits in the topic's queue, as before. Before: a start time was ignored (the query read
    those 10 too); after: it fails at the first batch naming the missing retention, having read nothing."""
    topic = name("history_none")
    sent = bodies(10, "q")
    publish(retaining, topic, sent)  # no channel: the topic's queue keeps them for the first
    message = failure(spark, retaining, topic, tmp_path / "time", startingTimestamp=str(now_ms() - 60_000))
    assert "retention is off" in message and topic in message and "--topic-retention" in message, message
    assert run(spark, retaining, topic, tmp_path / "earliest") == sorted(sent)


# -- case 8: a user schema ----------------------------------------------------------------------------------------

def test_a_user_schema_is_refused_with_a_clear_error(
        spark: SparkSession, retaining: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """Before: the query started and its tasks failed with PySpark's internal error; after: it fails naming the
    user schema, before any task."""
    topic = name("history_schema")
    publish(retaining, topic, bodies(3))
    stream = (spark.readStream.format("nsq").schema("body STRING, extra INT")
              .options(**source_options(retaining, topic, writeAheadLocation=str(tmp_path / "wal"))).load())
    with pytest.raises(Exception) as caught:
        query = (stream.writeStream.format("memory").queryName(f"schema_{topic}")
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        query.awaitTermination(60)
        if query.exception() is not None:
            raise AssertionError(str(query.exception()))
    assert "does not support a user-specified schema" in str(caught.value), caught.value
