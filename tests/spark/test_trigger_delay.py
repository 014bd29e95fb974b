"""minOffsetsPerTrigger/maxTriggerDelay across restarts (issue 48 case 7): the delay counts from the last batch (or
the channel's first start) as the offsets record it, so a query restarted more often than the delay still reads
a small channel; the first trigger after a restart fires at once once the delay has passed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from nsqd_py.spark import stop_gracefully
from tests.spark.util import bodies, publish, source_options
from tests.support import NsqdProcess

pytestmark = pytest.mark.slow

DELAY = 8.0  # a run lasts half of it: Spark takes a second or two to start one on 2 busy cores


def run_for(spark: SparkSession, opts: dict[str, str], tmp_path: Path, seconds: float) -> None:
    query = (spark.readStream.format("nsq").options(**opts).load().select("body").writeStream.format("parquet")
             .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="300 milliseconds").start())
    try:
        time.sleep(seconds)
        assert query.exception() is None
    finally:
        # a batch that started lets the query stop after it: on 2 cores busy with other tests, a stop at the
        # window's end cut a slow batch short at every restart, and the sink never got its rows
        stop_gracefully(query, [], timeout=60)


def rows(spark: SparkSession, tmp_path: Path) -> int:
    out = tmp_path / "out"
    return spark.read.parquet(str(out)).count() if any(out.glob("*.parquet")) else 0


def restarts_until(spark: SparkSession, opts: dict[str, str], tmp_path: Path, count: int, within: float) -> float:
    """Run the query for half the delay at a time until the sink holds ``count`` rows; the seconds it took."""
    began = time.monotonic()
    while rows(spark, tmp_path) < count:
        took = time.monotonic() - began
        assert took < within, (f"{rows(spark, tmp_path)} of {count} rows after {took:.0f}s of restarts every "
                               f"{DELAY / 2:g} s with maxTriggerDelay={DELAY:g}s")
        run_for(spark, opts, tmp_path, DELAY / 2)
    return time.monotonic() - began


def test_a_query_restarted_more_often_than_the_delay_reads_a_small_channel(
        spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    topic = name("restarted_min")
    opts = source_options(nsqd, topic, minOffsetsPerTrigger="1000", maxTriggerDelay=f"{DELAY:g}s",
                          writeAheadLocation=str(tmp_path / "wal"))
    publish(nsqd, topic, bodies(5))
    restarts_until(spark, opts, tmp_path, 5, within=6 * DELAY)  # from the channel's first start (no batch yet)
    publish(nsqd, topic, bodies(5, "later"))
    restarts_until(spark, opts, tmp_path, 10, within=6 * DELAY)  # from the first batch, as its offset records
    assert rows(spark, tmp_path) == 10


def test_the_delay_still_holds_a_small_channel_back_within_one_run(
        spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    topic = name("fresh_min")
    opts = source_options(nsqd, topic, minOffsetsPerTrigger="1000", maxTriggerDelay="1h",
                          writeAheadLocation=str(tmp_path / "wal"))
    publish(nsqd, topic, bodies(5))
    run_for(spark, opts, tmp_path, 3)
    run_for(spark, opts, tmp_path, 3)  # a restart is not a reason to read early
    assert rows(spark, tmp_path) == 0
