"""Batch and streaming writes through format("nsq"): the topic ends up holding exactly the rows' bodies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from nsqd_py.client.errors import NSQConnectionError, ServerError
from nsqd_py.spark.options import WriteOptions
from nsqd_py.spark.writer import _MPUBStream
from tests.spark.util import drained, publish, topic_depth
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


def stream_options(nsqd: NsqdProcess, topic: str, **extra: str) -> WriteOptions:
    return WriteOptions.parse({"topic": topic, "nsqd_tcp_addresses": nsqd.tcp_address, **extra})


def test_mpubs_go_ahead_of_their_answers_and_all_are_awaited(nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic = name("window")
    chunks = [[b"c%d-%d" % (c, i) for i in range(50)] for c in range(20)]
    with _MPUBStream(nsqd.tcp_address, stream_options(nsqd, topic, mpub_window="4")) as stream:
        for chunk in chunks:
            stream.send(chunk)
            assert len(stream._unanswered) < 4
        stream.flush()
        assert not stream._unanswered
        assert topic_depth(nsqd, topic) == 1000  # counted as soon as flush returns: every MPUB was answered
    assert sorted(bodies_in(nsqd, topic)) == sorted(b for chunk in chunks for b in chunk)


def test_an_error_answer_fails_the_write(nsqd_factory: Callable[..., NsqdProcess],
                                         name: Callable[[str], str]) -> None:
    small = nsqd_factory("--max-msg-size=100")
    with _MPUBStream(small.tcp_address, stream_options(small, name("toobig"))) as stream:
        stream.send([b"fits"])
        stream.send([b"x" * 200])
        with pytest.raises(ServerError, match="E_BAD_MESSAGE"):
            stream.flush()


def test_a_broken_connection_is_replaced_once_and_unanswered_mpubs_resent(
        nsqd_factory: Callable[..., NsqdProcess], name: Callable[[str], str]) -> None:
    """Computing rows can outlast a connection (nsqd restarted, or gave up on a client that answered no heartbeat)."""
    restarted = nsqd_factory()
    topic = name("replaced")
    with _MPUBStream(restarted.tcp_address, stream_options(restarted, topic)) as stream:
        stream.send([b"before"])
        stream.flush()
        first = stream._conn
        restarted.stop()
        restarted.start()  # same ports and data dir: "before" was flushed to disk
        stream.send([b"after"])
        stream.flush()
        assert stream._conn is not first
        restarted.stop()
        with pytest.raises(NSQConnectionError):  # broken again, and nowhere to reconnect: the task fails
            stream.send([b"lost"])
            stream.flush()
    restarted.start()
    assert sorted(bodies_in(restarted, topic)) == [b"after", b"before"]
