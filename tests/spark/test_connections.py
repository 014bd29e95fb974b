"""The connector's NSQ side without Spark: finding nsqd through nsqlookupd (the consumer subscribes on every nsqd
lookupd lists, writers spread over all registered nodes), compression, and TLS with AUTH."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from nsqd_py.spark.consumer import SourceConsumer
from nsqd_py.spark.discovery import all_nodes, topic_producers
from nsqd_py.spark.options import ReadOptions, WriteOptions
from nsqd_py.spark.writer import NSQWriter
from nsqd_py.testing import free_port
from tests.cluster.util import LookupdProcess
from tests.security.certs import make_pki
from tests.security.util import AuthServer
from tests.spark.util import drained, publish
from tests.support import NsqdProcess, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def lookupd(tmp_path: Path) -> Iterator[LookupdProcess]:
    proc = LookupdProcess(tmp_path).start()
    yield proc
    proc.stop()


def take_all(consumer: SourceConsumer, count: int) -> list:
    got: list = []
    wait_until(lambda: got.extend(consumer.take(1000, wait=0.2)) or len(got) >= count, timeout=20)
    return got


def test_consumer_and_writer_find_nsqd_through_lookupd(lookupd: LookupdProcess,
                                                       nsqd_factory: Callable[..., NsqdProcess],
                                                       name: Callable[[str], str]) -> None:
    nodes = [nsqd_factory("--broadcast-address=127.0.0.1", f"--lookupd-tcp-address={lookupd.tcp_address}")
             for _ in range(2)]
    wait_until(lambda: len(all_nodes((lookupd.http_address,))) == 2)
    assert all_nodes((lookupd.http_address,)) == {n.tcp_address for n in nodes}
    topic = name("found")
    for i, node in enumerate(nodes):
        publish(node, topic, [b"from %d" % i] * 5)
    wait_until(lambda: len(topic_producers((lookupd.http_address,), topic)) == 2)

    consumer = SourceConsumer(ReadOptions.parse({"topic": topic, "channel": "c",
                                           "lookupdHttpAddresses": lookupd.http_address}), max_in_flight=100)
    consumer.start()
    try:
        got = take_all(consumer, 10)
        assert sorted(m.body for m in got) == [b"from 0"] * 5 + [b"from 1"] * 5
        consumer.finish(got)
        for node in nodes:
            wait_until(lambda node=node: drained(node, topic, "c"))
    finally:
        consumer.close()

    # a writer task outside Spark is partition 0: the first node in address order
    schema = StructType([StructField("value", StringType())])
    writer = NSQWriter(WriteOptions.parse({"topic": topic + "_out", "lookupdHttpAddresses": lookupd.http_address}),
                       schema)
    result = writer.write(iter([pa.RecordBatch.from_pylist([{"value": "a"}, {"value": "b"}])]))
    assert result.counts == {topic + "_out": 2} and result.address == min(n.tcp_address for n in nodes)


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_compressed_connections(codec: str, nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic = name(codec)
    options = {"topic": topic, "channel": "c", "nsqdTcpAddresses": nsqd.tcp_address, codec: "true"}
    schema = StructType([StructField("body", StringType())])
    bodies = [f"{codec} {i} " * 20 for i in range(300)]
    NSQWriter(WriteOptions.parse(options), schema).write(iter([pa.RecordBatch.from_pylist([{"body": b}
                                                                                           for b in bodies])]))
    consumer = SourceConsumer(ReadOptions.parse(options), max_in_flight=500)
    consumer.start()
    try:
        got = take_all(consumer, 300)
        assert sorted(m.body.decode() for m in got) == sorted(bodies)
        consumer.finish(got)
        wait_until(lambda: drained(nsqd, topic, "c"))
    finally:
        consumer.close()


def test_tls_and_auth(nsqd_factory: Callable[..., NsqdProcess], name: Callable[[str], str], tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    auth = AuthServer()
    try:
        node = nsqd_factory(f"--tls-cert={pki.server_cert}", f"--tls-key={pki.server_key}",
                            f"--https-address=127.0.0.1:{free_port()}", f"--auth-http-address={auth.address}")
        topic = name("secure")
        options = {"topic": topic, "channel": "c", "nsqdTcpAddresses": node.tcp_address, "tls": "true",
                   "tlsCaFile": str(pki.ca), "authSecret": "s3cret"}
        schema = StructType([StructField("value", StringType())])
        NSQWriter(WriteOptions.parse(options), schema).write(iter([pa.RecordBatch.from_pylist([{"value": "hush"}])]))
        consumer = SourceConsumer(ReadOptions.parse(options), max_in_flight=10)
        consumer.start()
        try:
            [msg] = take_all(consumer, 1)
            assert msg.body == b"hush"
            consumer.finish([msg])
            wait_until(lambda: drained(node, topic, "c"))
        finally:
            consumer.close()
        assert {r.params["secret"] for r in auth.requests} == {"s3cret"}
        assert {r.params["tls"] for r in auth.requests} == {"true"}
    finally:
        auth.stop()
