"""What nsqd sends a task ahead is bounded by bytes too (issue 48 case 6), as Kafka's fetch.max.bytes bounds a fetch:
with 1 MiB bodies a task's RDY is no longer its row quota (up to 2,500 MiB in flight), but `fetchMaxBytes` (50 MiB)
over the body size."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from nsqd_py.client.connection import Connection
from tests.spark.util import drained, source_options
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow

MIB = 1024 * 1024


def publish_large(nsqd: NsqdProcess, topic: str, count: int) -> None:
    with Connection(nsqd.tcp_address).connect() as conn:
        conn.identify()
        for i in range(count):
            conn.request(b"PUB " + topic.encode() + b"\n" + (MIB).to_bytes(4, "big") + b"%08d" % i
                         + b"x" * (MIB - 8))


class InFlightPeak:
    """The most messages nsqd had in flight on a channel, sampled every 10 ms."""

    def __init__(self, nsqd: NsqdProcess, topic: str) -> None:
        self.nsqd, self.topic, self.peak = nsqd, topic, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            with contextlib.suppress(AssertionError):  # the channel does not exist yet
                self.peak = max(self.peak, channel_stats(self.nsqd, self.topic, "c")["in_flight_count"])

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


@pytest.mark.parametrize(("fetch_max_bytes", "bound"), [(None, 50), ("8388608", 8)])
def test_a_task_holds_at_most_fetch_max_bytes_of_1_mib_bodies(
        spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path,
        fetch_max_bytes: str | None, bound: int) -> None:
    topic, count = name("large_bodies"), 120
    publish_large(nsqd, topic, count)
    extra = {"fetchMaxBytes": fetch_max_bytes} if fetch_max_bytes else {}
    opts = source_options(nsqd, topic, minPartitions="1", writeAheadLocation=str(tmp_path / "wal"), **extra)
    peak = InFlightPeak(nsqd, topic)
    query = (spark.readStream.format("nsq").options(**opts).load().writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(240)
    finally:
        held = peak.stop()
    assert query.exception() is None
    assert sum(p["numInputRows"] for p in query.recentProgress) == count
    wait_until(lambda: drained(nsqd, topic, "c"), timeout=10)
    print(f"fetchMaxBytes={fetch_max_bytes or 'default'}: at most {held} messages of 1 MiB in flight to the task")
    # before: RDY was the quota, so nsqd sent all 120 MiB to the one task at once
    assert 1 <= held <= bound + 1
