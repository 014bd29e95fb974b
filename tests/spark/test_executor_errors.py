"""Executors that cannot connect (issue 38, case 2): a connection that can never work as configured fails the task
naming its cause, and an nsqd that is down from the executors shows in the progress, stops being planned every
trigger, and fails availableNow.

Before, every error of a task's connection counted as "nsqd unreachable": the slice ended empty with a warning in an
executor log, while the driver's /stats survey kept planning batches for that nsqd: empty batches without end, and
availableNow never finished."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from nsqd_py.spark.connect import ConnectionConfigError
from nsqd_py.spark.consumer import SourceConsumer
from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.planner import UnreachableError
from nsqd_py.spark.reader import NSQStreamReader
from nsqd_py.spark.schema import ARROW_SCHEMA
from nsqd_py.spark.slice_task import SliceTask
from nsqd_py.testing import free_port
from tests.security.certs import Pki, make_pki
from tests.security.util import AuthServer, grant
from tests.spark.util import bodies, http_address, publish
from tests.support import NsqdProcess, channel_stats

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def auth() -> Iterator[AuthServer]:
    """Grants everything on topics starting with `ok`, nothing on others; refuses the secret `wrong`."""
    server = AuthServer(responder=lambda req: (403, {"message": "NOT_AUTHORIZED"})
                        if req.params.get("secret") == "wrong" else (200, grant(topic="ok.*")))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki, auth: AuthServer) -> Iterator[NsqdProcess]:
    """An nsqd that requires TLS (on TCP; the driver's survey uses plain HTTP) and AUTH; its HTTPS on a port of its
    own (nsqd's default 0.0.0.0:4152 collides with other servers')."""
    proc = NsqdProcess(tmp_path_factory.mktemp("secured"), f"--tls-cert={pki.server_cert}",
                       f"--tls-key={pki.server_key}", f"--https-address=127.0.0.1:{free_port()}",
                       "--tls-required=tcp-https",
                       f"--auth-http-address={auth.address}").start()
    yield proc
    proc.stop()


def one_slice(tcp: str, http: str, topic: str, location: Path, available_now: bool = False,
              **extra: str) -> tuple[NSQStreamReader, dict, SliceTask]:
    """The first batch of a reader of ``topic`` (the driver's survey goes to ``http``) and its one task, planned as
    Spark plans it."""
    options = {"subscribe": topic, "channel": "c", "nsqdTcpAddresses": tcp, "nsqdHttpAddresses": http,
               "pollTimeout": "300ms", "writeAheadLocation": str(location), "minPartitions": "1", **extra}
    reader = NSQStreamReader(ReadOptions.parse(options))
    start = reader.initialOffset()
    if available_now:
        reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["batch"] == 1
    [part] = reader.partitions(start, end)
    return reader, end, SliceTask(part.plan, reader.opts, part.cutoff_ns)


def on(node: NsqdProcess, topic: str, location: Path, **extra: str) -> tuple[NSQStreamReader, dict, SliceTask]:
    return one_slice(node.tcp_address, http_address(node), topic, location, **extra)


def read_all(task: SliceTask) -> pa.Table:
    return pa.Table.from_batches(list(task.run()), ARROW_SCHEMA)


@pytest.mark.parametrize(("extra", "cause"), [
    ({"tls": "true", "tlsCaFile": "/nonexistent/ca.pem"}, r"option 'tlsCaFile': cannot load '/nonexistent/ca.pem'"),
    ({"tls": "true", "authSecret": "s"}, r"TLS with nsqd .* failed: .*certificate verify failed.*'tlsCaFile'"),
    ({"tls": "true", "tlsCaFile": "{ca}"}, r"requires AUTH: set the 'authSecret' option"),
    ({"tls": "true", "tlsCaFile": "{ca}", "authSecret": "wrong"}, r"refused: E_AUTH_FAILED"),
])
def test_a_connection_that_cannot_work_as_configured_fails_the_task_naming_its_cause(
        secured: NsqdProcess, pki: Pki, name: Callable[[str], str], tmp_path: Path, extra: dict[str, str],
        cause: str) -> None:
    """Before: each of these ended the slice empty with a warning (a missing CA file, a refused certificate, AUTH
    required or refused all counted as 'unreachable'); after: the task fails with the option or nsqd's answer."""
    topic = name("ok_cfg")
    publish(secured, topic, bodies(3))
    options = {key: value.format(ca=pki.ca) for key, value in extra.items()}
    _, _, task = on(secured, topic, tmp_path, **options)
    with pytest.raises(ConnectionConfigError, match=cause):
        read_all(task)
    assert channel_stats(secured, topic, "c")["depth"] == 3


def test_a_topic_the_secret_does_not_grant_fails_the_task(secured: NsqdProcess, pki: Pki,
                                                          name: Callable[[str], str], tmp_path: Path) -> None:
    """SUB answered E_UNAUTHORIZED: before, an empty slice; after, the task fails naming nsqd's answer."""
    topic = name("denied")
    publish(secured, topic, bodies(2))
    _, _, task = on(secured, topic, tmp_path, tls="true", tlsCaFile=str(pki.ca), authSecret="s")
    with pytest.raises(ConnectionConfigError, match=r"refused: E_UNAUTHORIZED .*'authSecret'"):
        read_all(task)


def test_a_configured_connection_still_reads(secured: NsqdProcess, pki: Pki, name: Callable[[str], str],
                                             tmp_path: Path) -> None:
    """The counter-check of the refusals above: the same nsqd, configured right, reads every message."""
    topic = name("ok_read")
    publish(secured, topic, bodies(5))
    _, _, task = on(secured, topic, tmp_path, tls="true", tlsCaFile=str(pki.ca), authSecret="s")
    assert sorted(read_all(task).column("body").to_pylist()) == sorted(bodies(5))


def test_an_nsqd_the_executors_cannot_reach_is_reported_paused_and_fails_available_now(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """Before: the slice ended empty with a warning only, and the next trigger planned the same nsqd again (an empty
    batch per trigger, without end). After: the progress names it, it is planned again only after a pause, and
    availableNow fails instead of spinning."""
    topic = name("tcp_down")
    publish(nsqd, topic, bodies(4))
    refused = f"127.0.0.1:{free_port()}"  # the executors' view: nsqd's HTTP answers the driver, its TCP port refuses
    reader, first, task = one_slice(refused, http_address(nsqd), topic, tmp_path)
    assert read_all(task).num_rows == 0
    assert reader.latestOffset(first, reader.getDefaultReadLimit()) == first  # paused: no empty batch now
    progress = reader.reportLatestOffset()
    assert progress is not None
    assert progress["unreachableFromExecutors"][refused]["batches"] == 1
    reader.commit(first)
    assert reader.reportLatestOffset()["unreachableSlices"] == 1  # type: ignore[index]

    available_now, first, task = one_slice(refused, http_address(nsqd), topic, tmp_path / "now", available_now=True)
    read_all(task)
    with pytest.raises(UnreachableError, match=f"executors could not connect to nsqd {refused}"):
        available_now.latestOffset(first, available_now.getDefaultReadLimit())
    assert channel_stats(nsqd, topic, "c")["depth"] == 4  # nothing was taken


def test_spark_fails_the_query_naming_the_missing_secret(spark: SparkSession, secured: NsqdProcess, pki: Pki,
                                                         name: Callable[[str], str], tmp_path: Path) -> None:
    """Through Spark: before, availableNow planned empty batches forever; after, the query fails with the cause."""
    topic = name("ok_spark")
    publish(secured, topic, bodies(2))
    stream = (spark.readStream.format("nsq").option("subscribe", topic).option("channel", "c")
              .option("nsqdTcpAddresses", secured.tcp_address).option("nsqdHttpAddresses", http_address(secured))
              .option("tls", "true").option("tlsCaFile", str(pki.ca))
              .option("writeAheadLocation", str(tmp_path / "wal")).load())
    query = (stream.writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "cp")).start())
    with pytest.raises(StreamingQueryException, match="authSecret"):
        query.awaitTermination(120)


def test_read_mode_driver_fails_at_start_on_a_refused_secret(secured: NsqdProcess, pki: Pki,
                                                              name: Callable[[str], str]) -> None:
    """readMode=driver: before, the driver's consumer failed as if nsqd were down ("could not subscribe"; through
    lookupd it retried forever); after, its start fails naming nsqd's answer."""
    options = {"subscribe": name("ok_driver"), "channel": "c", "nsqdTcpAddresses": secured.tcp_address,
               "tls": "true", "tlsCaFile": str(pki.ca), "authSecret": "wrong", "readMode": "driver"}
    consumer = SourceConsumer(ReadOptions.parse(options), max_in_flight=10)
    try:
        with pytest.raises(ConnectionConfigError, match="E_AUTH_FAILED"):
            consumer.start()
    finally:
        consumer.close()
