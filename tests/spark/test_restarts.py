"""Restarts at the edges (issue 38, cases 1, 4 and 10): startingOffsets is applied once, a changed
writeAheadLocation takes the next batches, and a commit Spark repeats is counted once. The driver's side is the
reader's methods, called in the order Spark calls them (a restart is a new reader), against a real nsqd; the first
case also through Spark, restarting a query on its checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.reader import NSQStreamReader
from nsqd_py.spark.schema import ARROW_SCHEMA
from nsqd_py.spark.slice_task import SliceTask
from tests.spark.util import bodies, hold_in_flight, publish, source_options
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow


def reader_of(nsqd: NsqdProcess, topic: str, location: Path, **extra: str) -> NSQStreamReader:
    return NSQStreamReader(ReadOptions.parse(source_options(nsqd, topic, writeAheadLocation=str(location),
                                                            **extra)))


def run_batch(reader: NSQStreamReader, start: dict) -> tuple[dict, list[bytes]]:
    """Plan the next batch, run its tasks, return its offset and bodies (not committed)."""
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["batch"] == start["batch"] + 1
    tables = [pa.Table.from_batches(list(SliceTask(p.plan, reader.opts, None).run()), ARROW_SCHEMA)
              for p in reader.partitions(start, end)]
    return end, sorted(body for table in tables for body in table.column("body").to_pylist())


def pending(nsqd: NsqdProcess, topic: str) -> int:
    stats = channel_stats(nsqd, topic, "c")
    return stats["depth"] + stats["in_flight_count"] + stats["deferred_count"]


def make_channel(nsqd: NsqdProcess, topic: str, location: Path) -> None:
    """The first trigger of another query creates the channel, as its first SUB would."""
    reader = reader_of(nsqd, topic, location)
    start = reader.initialOffset()
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start


# -- 1: startingOffsets=latest, once ------------------------------------------------------------------------------

def test_a_restart_before_any_batch_was_logged_does_not_empty_the_channel_again(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """Before: the restarted reader emptied the channel again, dropping the 3 messages published after the first
    start; after: only the first start empties it, the restart reads them."""
    topic = name("latest_once")
    make_channel(nsqd, topic, tmp_path / "unused")  # the backlog waits in the channel
    publish(nsqd, topic, bodies(5, "old"))
    first = reader_of(nsqd, topic, tmp_path / "fresh", startingOffsets="latest")
    start = first.initialOffset()
    assert pending(nsqd, topic) == 0  # a new query at latest: the backlog is skipped
    assert first.latestOffset(start, first.getDefaultReadLimit()) == start  # no batch logged
    publish(nsqd, topic, bodies(3, "new"))

    restarted = reader_of(nsqd, topic, tmp_path / "fresh", startingOffsets="latest")
    start = restarted.initialOffset()
    _, read = run_batch(restarted, start)
    assert read == bodies(3, "new")


def test_a_restart_before_batch_0_committed_keeps_what_waits_and_what_is_in_flight(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """The driver dies after logging its first batch, with a killed task's messages in flight. Before: the restart
    emptied the channel (in-flight messages included); after: the replay reads the batch's slices and the channel
    keeps everything else."""
    topic = name("latest_batch0")
    first = reader_of(nsqd, topic, tmp_path, startingOffsets="latest", maxOffsetsPerTrigger="4", minPartitions="1")
    start = first.initialOffset()
    publish(nsqd, topic, bodies(10))
    end, read = run_batch(first, start)  # logged, never committed: the driver dies here
    assert len(read) == 4
    conn, _ = hold_in_flight(nsqd, topic, 2)  # a task killed holding two messages
    try:
        restarted = reader_of(nsqd, topic, tmp_path, startingOffsets="latest", maxOffsetsPerTrigger="4",
                              minPartitions="1")
        replay_start = restarted.initialOffset()
        assert pending(nsqd, topic) == 6
        replayed = [pa.Table.from_batches(list(SliceTask(p.plan, restarted.opts, None).run()), ARROW_SCHEMA)
                    for p in restarted.partitions(replay_start, end)]
        assert sorted(b for t in replayed for b in t.column("body").to_pylist()) == read
    finally:
        conn.close()
    restarted.commit(end)
    _, rest = run_batch(restarted, end)
    assert len(rest) == 4  # of the 6 left (the two once held come back after their timeout)


def test_a_query_started_at_earliest_continues_when_restarted_with_latest(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """The record keeps the first start's choice: before, switching to latest on a restart emptied the channel."""
    topic = name("earliest_then_latest")
    make_channel(nsqd, topic, tmp_path)  # a query at earliest: its first trigger
    publish(nsqd, topic, bodies(3))
    reader_of(nsqd, topic, tmp_path, startingOffsets="latest").initialOffset()
    assert pending(nsqd, topic) == 3


def test_spark_restarted_on_its_checkpoint_reads_what_was_published_after_the_first_start(
        spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """A query at latest starts (skipping the backlog) and stops before its first batch; messages arrive; the
    query restarts on its checkpoint. Before: the restart emptied the channel again and read nothing; after: it
    reads the 3 messages."""
    topic = name("spark_latest")
    make_channel(nsqd, topic, tmp_path / "unused")  # the backlog waits in the channel
    publish(nsqd, topic, bodies(5, "old"))

    def query(trigger: dict) -> object:
        stream = (spark.readStream.format("nsq").options(**source_options(nsqd, topic))
                  .option("startingOffsets", "latest").option("writeAheadLocation", str(tmp_path / "wal")).load())
        return (stream.selectExpr("CAST(body AS STRING) AS body").writeStream.format("parquet")
                .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(**trigger).start())

    # the first trigger fires at start and finds nothing new; none follows for an hour, so the stop below cannot
    # land inside a batch's offset write (Spark then refuses the checkpoint: "should be empty on batch 0")
    first = query({"processingTime": "1 hour"})
    wait_until(lambda: pending(nsqd, topic) == 0, timeout=60)  # started: the backlog is skipped
    wait_until(lambda: not first.status["isTriggerActive"], timeout=60)  # type: ignore[attr-defined]
    first.stop()  # type: ignore[attr-defined]
    publish(nsqd, topic, bodies(3, "new"))
    second = query({"availableNow": True})
    second.awaitTermination(120)  # type: ignore[attr-defined]
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(row.body for row in rows) == [b.decode() for b in bodies(3, "new")]


# -- 4: writeAheadLocation changed between runs -------------------------------------------------------------------

def test_a_changed_write_ahead_location_takes_the_next_batches_and_replays_stay_where_they_were(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """Before: the next batch's _planned went to the old location while its offset named the new one, so every run
    failed with a false data-loss error, even after the option was set back. After: each batch lives wholly in the
    location of the run that planned it."""
    topic = name("moved")
    publish(nsqd, topic, bodies(15))
    limits = {"maxOffsetsPerTrigger": "5", "minPartitions": "1"}
    first = reader_of(nsqd, topic, tmp_path / "a", **limits)
    one, read_one = run_batch(first, first.initialOffset())
    first.commit(one)

    moved = reader_of(nsqd, topic, tmp_path / "b", **limits)
    two, read_two = run_batch(moved, one)
    assert (tmp_path / "b" / two["query"] / f"{2:012d}" / "_planned").exists()
    assert moved.partitions(one, two)  # a replay of batch 2 finds it in b
    moved.commit(two)

    back = reader_of(nsqd, topic, tmp_path / "a", **limits)  # set back
    replay = [pa.Table.from_batches(list(SliceTask(p.plan, back.opts, None).run()), ARROW_SCHEMA)
              for p in back.partitions(one, two)]
    assert sorted(b for t in replay for b in t.column("body").to_pylist()) == read_two
    three, read_three = run_batch(back, two)
    back.commit(three)
    assert sorted(read_one + read_two + read_three) == sorted(bodies(15))


# -- 10: a commit Spark repeats -----------------------------------------------------------------------------------

def test_a_repeated_commit_counts_once(nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """Stateful queries (nsq-pipeline's dedupe) run no-data batches that commit the same offset again. Before: the
    progress counted the batch's chunks twice; after: once."""
    topic = name("recommit")
    publish(nsqd, topic, bodies(6))
    reader = reader_of(nsqd, topic, tmp_path, minPartitions="1")
    end, read = run_batch(reader, reader.initialOffset())
    assert len(read) == 6
    reader.commit(end)
    reader.commit(end)
    reader.latestOffset(end, reader.getDefaultReadLimit())
    progress = reader.reportLatestOffset()
    assert progress is not None
    assert progress["freshChunks"] == 1
