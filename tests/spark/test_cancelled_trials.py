"""Trials Spark cuts short (issue 38, case 9). When Spark cancels a task (a speculative copy that lost, a stage
cancel, `query.stop()`), PySpark's daemon SIGKILLs its Python worker spark.python.task.killTimeout later, and
nothing reaches the worker before: no signal, no closed socket, no exception. So a trial that stays cannot tell a
kill from a crash, and a message is dead-lettered only when two trials holding it stayed, one with it alone."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from nsqd_py.client.protocol import Message
from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.reader import NSQStreamReader, SlicePartition
from nsqd_py.spark.slice_task import SliceTask
from nsqd_py.spark.slices import SliceStore
from nsqd_py.spark.source import NSQDataSource
from nsqd_py.spark.trials import Trials, explained
from tests.spark.util import hold_in_flight, publish, source_options
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers get the stuck source below by value

#: next to the write-ahead location: the pid of the worker whose trial hangs (written once; later runs read on)
_STUCK = "stuck-trial.pid"


class _StuckTrialReader(NSQStreamReader):
    """The nsq reader, except that the first trial's chunk hangs in its publish until Spark kills the worker."""

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        task = SliceTask(partition.plan, self.opts, partition.cutoff_ns)
        marker = Path(partition.plan.location).parent / _STUCK
        publish = task.slice.publish

        def publish_or_hang(number: int, table: pa.Table) -> bool:
            if task.subscription.trial is not None and not marker.exists():
                marker.write_text(str(os.getpid()))
                time.sleep(120)  # Spark kills this worker a few seconds after the query stops
            return publish(number, table)

        task.slice.publish = publish_or_hang  # type: ignore[method-assign]
        yield from task.run()


class _StuckTrialSource(NSQDataSource):
    @classmethod
    def name(cls) -> str:
        return "nsq_stuck_trial"

    def streamReader(self, schema: StructType) -> NSQStreamReader:  # type: ignore[override]
        return _StuckTrialReader(ReadOptions.parse(self.options))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _trial_files(location: Path) -> list[Path]:
    return sorted(location.glob("*/_trials/*/*.json"))


def test_a_trial_spark_cut_short_by_stopping_the_query_makes_no_dead_letter(
        spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """A suspect's trial (alone: the only suspect) hangs in its publish; `query.stop()` makes Spark SIGKILL the
    worker, and the trial stays just as a crash would leave it. Before: the restarted query dead-lettered the healthy
    message (a trial of it alone had stayed) and read nothing; after: it tries it alone again and reads it once."""
    topic = name("cancelled_trial")
    publish(nsqd, topic, [b"healthy"])
    conn, [msg] = hold_in_flight(nsqd, topic, 1)
    with conn:  # delivered once: with maxAttempts=1 the next delivery is a suspect
        conn.req(msg.id)
        conn.nop()
    wait_until(lambda: channel_stats(nsqd, topic, "c")["depth"] == 1)
    spark.dataSource.register(_StuckTrialSource)
    location = tmp_path / "wal"

    def query(trigger: dict) -> object:
        stream = (spark.readStream.format("nsq_stuck_trial")
                  .options(**source_options(nsqd, topic, maxAttempts="1", msgTimeout="1s", minPartitions="1",
                                            writeAheadLocation=str(location))).load())
        return (stream.selectExpr("CAST(body AS STRING) AS body").writeStream.format("parquet")
                .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(**trigger).start())

    first = query({"processingTime": "100 milliseconds"})
    marker = tmp_path / _STUCK
    # the pid, not only the file: write_text creates the file before it writes
    wait_until(lambda: marker.exists() and marker.read_text() != "", timeout=60, what="the trial's publish to hang")
    worker = int(marker.read_text())
    first.stop()  # type: ignore[attr-defined]
    wait_until(lambda: not _alive(worker), timeout=60, what="Spark to kill the stuck worker")
    [trial] = _trial_files(location)  # left as a crash leaves it: the suspect alone
    assert json.loads(trial.read_text())["size"] == 1

    second = query({"availableNow": True})
    second.awaitTermination(120)  # type: ignore[attr-defined]
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert [row.body for row in rows] == ["healthy"]
    assert not nsqd.stats(topic=f"{topic}_dead_letter")["topics"]
    assert not _trial_files(location)  # the second trial ended, and the first with it
    assert channel_stats(nsqd, topic, "c")["depth"] == 0


def test_a_dead_letter_takes_two_trials_that_stayed_one_alone(tmp_path: Path) -> None:
    """Before, one trial of a message alone that stayed made it a dead letter, a trial Spark cut short included.
    After: two deaths, one of them alone; a dead letter explains the group trial it was in, which then counts
    against none of the others."""
    trials = Trials(SliceStore(str(tmp_path), "q1"), "t", "127.0.0.1:4150")
    culprit, bystander, lone = (Message(f"{i:016d}".encode(), b"x", 0, 3) for i in range(3))
    trials.start([culprit, bystander])
    trials.start([culprit])
    trials.start([lone])
    verdicts = trials.judge([culprit, bystander, lone], trials.failed())
    assert (verdicts.dead, verdicts.alone, verdicts.untried) == ([culprit], [bystander, lone], [])

    trials.start([lone])  # it killed a second task alone
    assert trials.judge([lone], trials.failed()).dead == [lone]
    left = explained(frozenset({culprit.id}), trials.failed())
    assert sorted(len(t.ids) for t in left) == [1, 1] and sorted(len(t.ids) for t in trials.failed()) == [1, 1]
    assert trials.judge([bystander], trials.failed()).untried == [bystander]
