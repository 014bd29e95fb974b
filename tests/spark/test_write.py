"""Batch and streaming writes through format("nsq"): the topic ends up holding exactly the rows' bodies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from tests.spark.util import drained, publish
from tests.support import NsqdProcess, drain, wait_until

pytestmark = pytest.mark.slow


def bodies_in(nsqd: NsqdProcess, topic: str) -> list[bytes]:
    return [m.body for m in drain(nsqd.tcp_port, topic, "check", idle=1.5, rdy=2500)]


def test_batch_write_publishes_every_row(spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic, count = name("write"), 3000
    rows = [(f"row {i} ünïcode",) for i in range(count)]
    df = spark.createDataFrame(rows, StructType([StructField("value", StringType())])).repartition(3)

    (df.write.format("nsq").mode("append").option("topic", topic).option("nsqd_tcp_addresses", nsqd.tcp_address)
     .option("mpub_max_messages", "400").save())

    assert sorted(bodies_in(nsqd, topic)) == sorted(r[0].encode() for r in rows)


def test_batch_write_of_a_binary_body_column(spark: SparkSession, nsqd: NsqdProcess,
                                             name: Callable[[str], str]) -> None:
    topic = name("write_bin")
    rows = [(i, bytes([i % 256]) * (1 + i % 70)) for i in range(500)]
    schema = StructType([StructField("n", StringType()), StructField("body", BinaryType())])
    df = spark.createDataFrame([(str(n), b) for n, b in rows], schema)

    (df.write.format("nsq").mode("append").option("topic", topic).option("nsqd_tcp_addresses", nsqd.tcp_address)
     .option("mpub_max_bytes", "2000").save())

    assert sorted(bodies_in(nsqd, topic)) == sorted(b for _, b in rows)


def test_write_needs_a_value_or_body_column(spark: SparkSession, nsqd: NsqdProcess) -> None:
    df = spark.createDataFrame([("x",)], StructType([StructField("payload", StringType())]))
    with pytest.raises((AnalysisException, PythonException), match="'value' or 'body' column"):
        df.write.format("nsq").mode("append").option("topic", "t").option("nsqd_tcp_addresses",
                                                                          nsqd.tcp_address).save()


def test_stream_bridges_one_topic_into_another(spark: SparkSession, nsqd: NsqdProcess,
                                               name: Callable[[str], str], tmp_path: Path) -> None:
    source, target, count = name("bridge_in"), name("bridge_out"), 400
    bodies = [f"bridged {i}".encode() for i in range(count)]
    publish(nsqd, source, bodies)

    query = (spark.readStream.format("nsq").option("topic", source).option("channel", "bridge")
             .option("nsqd_tcp_addresses", nsqd.tcp_address).option("max_messages_per_batch", "200")
             .option("idle_timeout", "5s").load()
             .select("body")
             .writeStream.format("nsq").option("topic", target).option("nsqd_tcp_addresses", nsqd.tcp_address)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None

    assert sorted(bodies_in(nsqd, target)) == sorted(bodies)
    wait_until(lambda: drained(nsqd, source, "bridge"), timeout=10)
