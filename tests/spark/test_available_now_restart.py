"""trigger(availableNow=True) across an nsqd restart (issue 48 case 1): nsqd's counters start again from 0, so the
count that tells the messages from before the start from the newer ones is lost; the run still ends at what was
there at its start, as Kafka's ends at the offsets it fixed, and leaves the newer messages in the channel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from tests.spark.util import bodies, publish, source_options
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("flags", "count", "newer", "per_batch"), [
    ((), 1000, 300, 200),
    # a task's RDY fills with 50 newer messages: a batch that reads nothing then does not end the run
    (("--max-rdy-count=50",), 100, 200, 20),
], ids=["default", "rdy-50"])
def test_available_now_ends_at_its_start_when_nsqd_restarts_mid_run(
        spark: SparkSession, nsqd_factory: Callable[..., NsqdProcess], name: Callable[[str], str], tmp_path: Path,
        flags: tuple[str, ...], count: int, newer: int, per_batch: int) -> None:
    restarted = nsqd_factory(*flags)
    topic = name("an_restart")
    before = bodies(count)
    publish(restarted, topic, before)
    seen: list[bytes] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        got = [r.body for r in df.select("body").collect()]
        if got and not seen:  # the first batch is read: newer messages arrive, and nsqd restarts
            publish(restarted, topic, bodies(newer, "newer"))
            restarted.stop()
            restarted.start()  # same ports and data dir: the channel's messages were written to disk
        seen.extend(got)

    opts = source_options(restarted, topic, maxOffsetsPerTrigger=str(per_batch),
                          writeAheadLocation=str(tmp_path / "wal"))
    query = (spark.readStream.format("nsq").options(**opts).load().writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    try:
        ended = query.awaitTermination(120)
    finally:
        query.stop()
    assert ended, f"availableNow did not end: {len(seen)} of {count} read, {len(seen) - count} past them"
    assert query.exception() is None
    assert sorted(seen) == sorted(before)  # each of what was there at the start, once; none of the newer ones
    wait_until(lambda: channel_stats(restarted, topic, "c")["in_flight_count"] == 0, timeout=15)
    assert channel_stats(restarted, topic, "c")["depth"] == newer
