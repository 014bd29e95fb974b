"""Streaming reads through format("nsq") on local[2] against a real nsqd, on the executors (the default) and, where
the test says so, with readMode=driver: exactly the published messages reach the sink, a failed batch and a stopped
query lose nothing, and the channel ends empty with nothing in flight."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from nsqd_py.spark import stop_gracefully
from tests.spark.util import drained, http_address, publish
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow


def nsq_stream(spark: SparkSession, nsqd: NsqdProcess, topic: str, channel: str, write_ahead: Path | None,
               **options: object) -> DataFrame:
    """``write_ahead`` None leaves the default location (``nsq-write-ahead`` in the working directory)."""
    reader = (spark.readStream.format("nsq").option("topic", topic).option("channel", channel)
              .option("nsqdTcpAddresses", nsqd.tcp_address).option("nsqdHttpAddresses", http_address(nsqd)))
    if write_ahead is not None:
        reader = reader.option("writeAheadLocation", str(write_ahead))
    # readMode=driver: availableNow ends after idle_timeout without a message: wider than 2 s for a loaded CI machine
    for key, value in {"idleTimeout": "5s", **options}.items():
        reader = reader.option(key, str(value))
    return reader.load()


def query_id(checkpoint: Path) -> str:
    """The source's query id, from the first offset in Spark's offset log."""
    return json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[2])["query"]


@pytest.mark.parametrize("mode", ["executors", "driver"])
def test_stream_delivers_every_message_once(spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str],
                                            tmp_path: Path, mode: str) -> None:
    topic, channel, count = name("read"), "spark", 500
    bodies = [f"message {i}\nwith a newline".encode() for i in range(count)]
    publish(nsqd, topic, bodies)

    query = (nsq_stream(spark, nsqd, topic, channel, None, maxOffsetsPerTrigger=250, readMode=mode)
             .writeStream.format("parquet")
             .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert len(rows) == count
    assert len({r.id for r in rows}) == count
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert {(r.topic, r.channel, r.nsqd_address, r.attempts) for r in rows} == {(topic, channel, nsqd.tcp_address, 1)}
    assert all(len(r.id) == 16 and r.timestamp is not None for r in rows)
    # everything is FINed (in driver mode the last batch was committed by an empty batch)
    wait_until(lambda: drained(nsqd, topic, channel), timeout=10)
    assert channel_stats(nsqd, topic, channel)["message_count"] == count
    if mode == "executors":  # the default location needs no configuration: the working directory
        slices = Path("nsq-write-ahead", query_id(tmp_path / "checkpoint"))
        assert (slices / "_query").is_file()
        shutil.rmtree(slices)
        with contextlib.suppress(OSError):  # left to other queries, if any
            slices.parent.rmdir()


def test_failed_batch_is_redelivered_after_restart(spark: SparkSession, nsqd: NsqdProcess,
                                                   name: Callable[[str], str], tmp_path: Path) -> None:
    topic, channel, count = name("fail"), "spark", 300
    bodies = {f"event-{i}".encode() for i in range(count)}
    publish(nsqd, topic, sorted(bodies))
    seen: list[bytes] = []
    non_empty_batches = []

    def sink(df: DataFrame, batch_id: int) -> None:
        got = [r.body for r in df.select("body").collect()]
        if got:
            non_empty_batches.append(batch_id)
            if len(non_empty_batches) == 2:
                raise RuntimeError("sink failure")
        seen.extend(got)

    def run() -> None:
        (nsq_stream(spark, nsqd, topic, channel, tmp_path / "write-ahead", maxOffsetsPerTrigger=100,
                    msgTimeout="3s")
         .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "checkpoint"))
         .trigger(availableNow=True).start().awaitTermination(180))

    with pytest.raises(StreamingQueryException, match="sink failure"):
        run()
    assert 0 < len(seen) <= 100  # the first batch went through (and was committed when the second was planned)
    # the failed batch and the messages buffered behind it come back after msg_timeout
    wait_until(lambda: channel_stats(nsqd, topic, channel)["in_flight_count"] == 0, timeout=30)
    run()

    assert set(seen) == bodies  # nothing lost
    assert len(seen) == count  # the committed batch was not redelivered; the failed one never reached the sink
    wait_until(lambda: drained(nsqd, topic, channel), timeout=10)


def test_stopped_query_resumes_from_its_checkpoint(spark: SparkSession, nsqd: NsqdProcess,
                                                   name: Callable[[str], str], tmp_path: Path) -> None:
    topic, channel, count, batch = name("restart"), "spark", 400, 100
    bodies = {f"event-{i}".encode() for i in range(count)}
    publish(nsqd, topic, sorted(bodies))
    seen: list[bytes] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        seen.extend(r.body for r in df.select("body").collect())

    def start(**trigger: object):
        return (nsq_stream(spark, nsqd, topic, channel, tmp_path / "write-ahead", maxOffsetsPerTrigger=batch,
                           msgTimeout="3s")
                .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(**trigger).start())

    query = start(processingTime="0 seconds")
    wait_until(lambda: len(seen) >= 2 * batch, timeout=120)
    query.stop()
    first_run = len(seen)
    assert first_run < count
    wait_until(lambda: channel_stats(nsqd, topic, channel)["in_flight_count"] == 0, timeout=30)
    start(availableNow=True).awaitTermination(180)

    assert set(seen) == bodies  # every message at least once
    # duplicates: at most the batch the first run processed but whose commit never came
    assert count <= len(seen) <= count + batch
    assert len(seen) - len(set(seen)) <= batch
    wait_until(lambda: drained(nsqd, topic, channel), timeout=10)


@pytest.mark.parametrize("mode", ["executors", "driver"])
def test_clean_stop_commits_the_last_batch_and_hands_back_the_rest(spark: SparkSession, nsqd: NsqdProcess,
                                                                   name: Callable[[str], str],
                                                                   tmp_path: Path, mode: str) -> None:
    topic, channel, count = name("clean"), "spark", 1000
    bodies = [f"event-{i}".encode() for i in range(count)]
    publish(nsqd, topic, bodies)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start(**trigger: object):
        return (nsq_stream(spark, nsqd, topic, channel, tmp_path / "write-ahead", maxOffsetsPerTrigger=300,
                           msgTimeout="3s", readMode=mode)
                .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
                .trigger(**trigger).start())

    # a long trigger interval: the stop below must come between the first batches even on a loaded machine
    query = start(processingTime="10 seconds")
    # stop between triggers, right after a batch was written: its commit to the source is still to come
    wait_until(lambda: query.lastProgress is not None and query.lastProgress["numInputRows"] > 0
             and not query.status["isTriggerActive"], timeout=120, interval=0.05)
    assert stop_gracefully(query, [(topic, channel)], timeout=60)

    stats = channel_stats(nsqd, topic, channel)
    stored = spark.read.parquet(out).count()
    # what was written is FINed, a driver-mode reader's buffer is back in the channel: nothing left to redeliver
    assert stats["in_flight_count"] == 0 and stats["timeout_count"] == 0
    assert 0 < stored < count and stored + stats["depth"] == count

    start(availableNow=True).awaitTermination(180)
    rows = spark.read.parquet(out).select("id", "body").collect()
    assert len(rows) == count and len({r.id for r in rows}) == count  # no duplicates
    assert sorted(r.body for r in rows) == sorted(bodies)
    wait_until(lambda: drained(nsqd, topic, channel), timeout=10)
