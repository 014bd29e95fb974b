"""The sink under a slow nsqd and a slow upstream (issue 48 case 2): nothing is published twice without a word.

A slow answer (a disk stall, a paused VM: here a proxy that holds nsqd's answers) is awaited for `requestTimeout`,
not taken for a broken connection after `connectTimeout` and the MPUB sent again; past `requestTimeout` the task
fails with an error naming the messages in doubt, and none is resent. Rows that come more slowly than nsqd's idle
timeout get a new connection each time nsqd closes the idle one, since nothing is in doubt then.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from pyspark.errors import PythonException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tests.spark.util import topic_depth
from tests.support import NsqdProcess, drain, wait_until

pytestmark = pytest.mark.slow

BATCH = 10_000  # Spark's default arrow maxRecordsPerBatch: each upstream batch reaches the writer on its own


class SlowProxy:
    """A TCP proxy to nsqd that, once `stall` is called, holds nsqd's answers on the connections open then."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.stalled: set[int] = set()
        self.hold_until = 0.0
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self, seconds: float) -> None:
        self.stalled = set(range(self.connections))
        self.hold_until = time.monotonic() + seconds

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            ident, self.connections = self.connections, self.connections + 1
            threading.Thread(target=self._pump, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, ident), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers_of: int | None) -> None:
        try:
            while data := src.recv(65536):
                if answers_of is not None and answers_of in self.stalled:
                    time.sleep(max(0.0, self.hold_until - time.monotonic()))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def batches_with_gaps(spark: SparkSession, count: int, gap: float) -> DataFrame:
    """One partition of ``count`` batches of BATCH rows, the upstream (a costly UDF) taking ``gap`` seconds before
    each after the first. Spark hands a batch to the writer once it sees the next row, so the writer gets batch k
    at k * gap and the last one right after the one before."""

    @F.udf("string")
    def slow(n: int) -> str:
        if n and n % BATCH == 0:
            time.sleep(gap)
        return f"{n // BATCH}-{n % BATCH}"

    return spark.range(count * BATCH, numPartitions=1).select(slow("id").alias("value"))


def published(nsqd: NsqdProcess, topic: str) -> Counter[bytes]:
    return Counter(m.body for m in drain(nsqd.tcp_port, topic, "check", idle=1.5, rdy=2500))


def write(df: DataFrame, topic: str, address: str, **options: str) -> None:
    (df.write.format("nsq").mode("append").option("topic", topic).option("nsqdTcpAddresses", address)
     .options(**options).save())


def stall_after_first_batch(nsqd: NsqdProcess, topic: str, proxy: SlowProxy, seconds: float) -> threading.Thread:
    def run() -> None:
        wait_until(lambda: bool(nsqd.stats(topic=topic)["topics"]) and topic_depth(nsqd, topic) >= BATCH,
                   timeout=60, interval=0.02)
        proxy.stall(seconds)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_an_answer_slower_than_connect_timeout_is_awaited_not_resent(
        spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic, proxy = name("slow_answer"), SlowProxy(("127.0.0.1", nsqd.tcp_port))
    try:
        stalling = stall_after_first_batch(nsqd, topic, proxy, 3.0)  # three times connectTimeout
        write(batches_with_gaps(spark, 3, gap=1.0), topic, proxy.address, connectTimeout="1s")
        stalling.join()
    finally:
        proxy.close()
    assert proxy.stalled, "the second batch went out before the stall: the test proved nothing"
    counts = published(nsqd, topic)
    assert max(counts.values()) == 1, f"{sum(counts.values()) - len(counts)} duplicates"
    assert len(counts) == 3 * BATCH


def test_an_answer_slower_than_request_timeout_fails_the_task_and_is_not_resent(
        spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic, proxy = name("no_answer"), SlowProxy(("127.0.0.1", nsqd.tcp_port))
    try:
        stalling = stall_after_first_batch(nsqd, topic, proxy, 4.0)
        with pytest.raises(PythonException, match=r"MPUB\(s\) of \d+ message\(s\) to nsqd .* are unanswered: nsqd "
                                                  r"did not answer within requestTimeout \(1s\)"):
            write(batches_with_gaps(spark, 3, gap=1.0), topic, proxy.address, connectTimeout="1s",
                  requestTimeout="1s")
        stalling.join()
    finally:
        proxy.close()
    counts = published(nsqd, topic)
    assert max(counts.values()) == 1, f"{sum(counts.values()) - len(counts)} duplicates"
    assert len(counts) >= BATCH  # the first batch, and what of the second was sent before the stall was seen


def test_rows_slower_than_nsqds_idle_timeout_are_published_once(
        spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    """heartbeatInterval=1s: nsqd closes a client silent for 2 s, and the upstream takes 2.5 s per batch: nsqd closes
    the connection twice, each time with every MPUB answered."""
    topic = name("slow_rows")
    write(batches_with_gaps(spark, 4, gap=2.5), topic, nsqd.tcp_address, heartbeatInterval="1000")
    counts = published(nsqd, topic)
    assert max(counts.values()) == 1, f"{sum(counts.values()) - len(counts)} duplicates"
    assert len(counts) == 4 * BATCH
