"""Batch and streaming writes through format("nsq"): the topic ends up holding exactly the rows' bodies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from nsqd_py.client.errors import NSQConnectionError, ServerError
from nsqd_py.spark.options import OptionError, WriteOptions
from nsqd_py.spark.writer import Published, _chunks, _MPUBStream, _Router, _summary
from tests.spark.util import drained, http_address, publish, topic_depth
from tests.support import NsqdProcess, drain, wait_until

pytestmark = pytest.mark.slow


def bodies_in(nsqd: NsqdProcess, topic: str) -> list[bytes]:
    return [m.body for m in drain(nsqd.tcp_port, topic, "check", idle=1.5, rdy=2500)]


def test_batch_write_publishes_every_row(spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic, count = name("write"), 3000
    rows = [(f"row {i} ünïcode",) for i in range(count)]
    df = spark.createDataFrame(rows, StructType([StructField("value", StringType())])).repartition(3)

    (df.write.format("nsq").mode("append").option("topic", topic).option("nsqdTcpAddresses", nsqd.tcp_address)
     .option("mpubMaxMessages", "400").save())

    assert sorted(bodies_in(nsqd, topic)) == sorted(r[0].encode() for r in rows)


def test_batch_write_of_a_binary_body_column(spark: SparkSession, nsqd: NsqdProcess,
                                             name: Callable[[str], str]) -> None:
    topic = name("write_bin")
    rows = [(i, bytes([i % 256]) * (1 + i % 70)) for i in range(500)]
    schema = StructType([StructField("n", StringType()), StructField("body", BinaryType())])
    df = spark.createDataFrame([(str(n), b) for n, b in rows], schema)

    (df.write.format("nsq").mode("append").option("topic", topic).option("nsqdTcpAddresses", nsqd.tcp_address)
     .option("mpubMaxBytes", "2000").save())

    assert sorted(bodies_in(nsqd, topic)) == sorted(b for _, b in rows)


def test_write_needs_a_value_or_body_column(spark: SparkSession, nsqd: NsqdProcess) -> None:
    df = spark.createDataFrame([("x",)], StructType([StructField("payload", StringType())]))
    with pytest.raises((AnalysisException, PythonException), match="'value' or 'body' column"):
        df.write.format("nsq").mode("append").option("topic", "t").option("nsqdTcpAddresses",
                                                                          nsqd.tcp_address).save()


def test_rows_go_to_their_topic_column_and_null_to_the_topic_option(spark: SparkSession, nsqd: NsqdProcess,
                                                                   name: Callable[[str], str]) -> None:
    clicks, views, default = name("route_clicks"), name("route_views"), name("route_default")
    rows = [(f"row {i}", [clicks, views, None][i % 3]) for i in range(900)]
    schema = StructType([StructField("value", StringType()), StructField("Topic", StringType())])  # any case
    df = spark.createDataFrame(rows, schema).repartition(2)

    (df.write.format("nsq").mode("append").option("topic", default).option("nsqdTcpAddresses", nsqd.tcp_address)
     .option("mpubMaxMessages", "100").save())

    for routed, topic in ((clicks, clicks), (views, views), (None, default)):
        assert sorted(bodies_in(nsqd, topic)) == sorted(body.encode() for body, to in rows if to == routed)


def test_write_needs_a_topic_option_or_column(spark: SparkSession, nsqd: NsqdProcess) -> None:
    df = spark.createDataFrame([("x",)], StructType([StructField("value", StringType())]))
    with pytest.raises((AnalysisException, PythonException), match="needs a 'topic' option or a string 'topic' column"):
        df.write.format("nsq").mode("append").option("nsqdTcpAddresses", nsqd.tcp_address).save()


def test_a_topic_column_must_be_string(spark: SparkSession, nsqd: NsqdProcess) -> None:
    df = spark.createDataFrame([("x", 1)], StructType([StructField("value", StringType()),
                                                       StructField("topic", IntegerType())]))
    with pytest.raises((AnalysisException, PythonException), match="'topic' names each row's topic and must be string"):
        df.write.format("nsq").mode("append").option("topic", "t").option("nsqdTcpAddresses",
                                                                          nsqd.tcp_address).save()


def test_an_invalid_topic_fails_the_write_and_is_never_sent(spark: SparkSession, nsqd: NsqdProcess,
                                                            name: Callable[[str], str]) -> None:
    good = name("route_good")
    bad = f"{good} x"  # nsqd would take "MPUB route_good_… x" as an MPUB to route_good
    rows = [(f"good {i}", good) for i in range(10)] + [("bad", bad)] + [(f"late {i}", good) for i in range(10)]
    schema = StructType([StructField("value", StringType()), StructField("topic", StringType())])
    df = spark.createDataFrame(rows, schema).coalesce(1)

    with pytest.raises(PythonException, match=f"a row's topic '{bad}' is not a valid NSQ topic name"):
        (df.write.format("nsq").mode("append").option("nsqdTcpAddresses", nsqd.tcp_address)
         .option("mpubMaxMessages", "4").save())

    # at most the two MPUBs filled before the bad row (sent, not awaited): not the bad row, nor any after it
    assert set(bodies_in(nsqd, good)) <= {f"good {i}".encode() for i in range(8)}


def test_the_topic_option_is_optional_for_writing_but_checked() -> None:
    assert WriteOptions.parse({"nsqdTcpAddresses": "h:1"}).topic is None
    with pytest.raises(OptionError, match="valid NSQ topic name"):
        WriteOptions.parse({"topic": "a b", "nsqdTcpAddresses": "h:1"})


def test_the_log_counts_messages_per_topic() -> None:
    tasks = [Published("h:1", {"views": 2, "clicks": 1}), None, Published("h:2", {"views": 3})]
    assert _summary(tasks) == "6 messages (1 to clicks, 5 to views)"
    assert _summary([None]) == "0 messages"


def test_routing_defaults_null_and_rejects_invalid_names() -> None:
    assert _Router("fallback")(None) == "fallback"
    assert _Router(None)("events#ephemeral") == "events#ephemeral"
    with pytest.raises(ValueError, match="null and no 'topic' option"):
        _Router(None)(None)
    with pytest.raises(ValueError, match=r"'x{65}' is not a valid"):
        _Router("fallback")("x" * 65)


def test_interleaved_topics_go_out_in_full_mpubs_in_order() -> None:
    rows = [(f"t{i % 2}", b"%d" % i) for i in range(10)]
    assert list(_chunks(rows, max_messages=2, max_bytes=1024)) == [
        ("t0", [b"0", b"2"]), ("t1", [b"1", b"3"]), ("t0", [b"4", b"6"]), ("t1", [b"5", b"7"]),
        ("t0", [b"8"]), ("t1", [b"9"]),
    ]
    assert list(_chunks([("a", b"x" * 10), ("b", b"y"), ("a", b"z" * 10)], max_messages=9, max_bytes=20)) == [
        ("a", [b"x" * 10]), ("a", [b"z" * 10]), ("b", [b"y"]),  # a by bytes; the partial chunks at the end
    ]


def test_stream_bridges_one_topic_into_another(spark: SparkSession, nsqd: NsqdProcess,
                                               name: Callable[[str], str], tmp_path: Path) -> None:
    source, target, count = name("bridge_in"), name("bridge_out"), 400
    bodies = [f"bridged {i}".encode() for i in range(count)]
    publish(nsqd, source, bodies)

    query = (spark.readStream.format("nsq").option("topic", source).option("channel", "bridge")
             .option("nsqdTcpAddresses", nsqd.tcp_address).option("nsqdHttpAddresses", http_address(nsqd))
             .option("maxOffsetsPerTrigger", "200").option("writeAheadLocation", str(tmp_path / "write-ahead"))
             .option("idleTimeout", "5s").load()
             .select("body")
             .writeStream.format("nsq").option("topic", target).option("nsqdTcpAddresses", nsqd.tcp_address)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None

    assert sorted(bodies_in(nsqd, target)) == sorted(bodies)
    wait_until(lambda: drained(nsqd, source, "bridge"), timeout=10)


def stream_options(nsqd: NsqdProcess, topic: str, **extra: str) -> WriteOptions:
    return WriteOptions.parse({"topic": topic, "nsqdTcpAddresses": nsqd.tcp_address, **extra})


def test_mpubs_go_ahead_of_their_answers_and_all_are_awaited(nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic = name("window")
    chunks = [[b"c%d-%d" % (c, i) for i in range(50)] for c in range(20)]
    with _MPUBStream(nsqd.tcp_address, stream_options(nsqd, topic, mpubWindow="4")) as stream:
        for chunk in chunks:
            stream.send(topic, chunk)
            assert len(stream._unanswered) < 4
        stream.flush()
        assert not stream._unanswered
        assert topic_depth(nsqd, topic) == 1000  # counted as soon as flush returns: every MPUB was answered
    assert sorted(bodies_in(nsqd, topic)) == sorted(b for chunk in chunks for b in chunk)


def test_an_error_answer_fails_the_write(nsqd_factory: Callable[..., NsqdProcess],
                                         name: Callable[[str], str]) -> None:
    small, topic = nsqd_factory("--max-msg-size=100"), name("toobig")
    with _MPUBStream(small.tcp_address, stream_options(small, topic)) as stream:
        stream.send(topic, [b"fits"])
        stream.send(topic, [b"x" * 200])
        with pytest.raises(ServerError, match="E_BAD_MESSAGE"):
            stream.flush()


def test_a_broken_connection_with_every_mpub_answered_is_replaced(
        nsqd_factory: Callable[..., NsqdProcess], name: Callable[[str], str]) -> None:
    """Computing rows can outlast a connection (nsqd restarted, or gave up on a client that answered no heartbeat);
    with nothing unanswered on it nothing is in doubt, and nothing is sent twice."""
    restarted = nsqd_factory()
    topic, other = name("replaced"), name("replaced_other")
    with _MPUBStream(restarted.tcp_address, stream_options(restarted, topic)) as stream:
        stream.send(topic, [b"before"])
        stream.flush()
        first = stream._conn
        restarted.stop()
        restarted.start()  # same ports and data dir: "before" was flushed to disk
        stream.send(topic, [b"after"])
        stream.send(other, [b"other topic"])  # another topic, on the same (replaced) connection
        stream.flush()
        assert stream._conn is not first
        restarted.stop()
        with pytest.raises(NSQConnectionError):  # broken again, and nowhere to reconnect: the task fails
            stream.send(topic, [b"lost"])
            stream.flush()
    restarted.start()
    assert sorted(bodies_in(restarted, topic)) == [b"after", b"before"]
    assert bodies_in(restarted, other) == [b"other topic"]
