"""Security that fails closed (issue 48, cases 3-5), against real Spark and a real nsqd.

3. `tls=true` against an nsqd that does not grant TLS (IDENTIFY answers tls_v1 false): before, the source and the
   sink went on in plaintext, `authSecret` included; now the first connection fails naming the option and nsqd.
4. An nsqd with `--tls-required`: before, the driver's survey spoke plain HTTP (nsqd answers 403) and ignored the
   CA and client certificate for an `https://` address, so the query read nothing, forever; now the survey uses
   the reads' TLS settings, and an HTTPS nsqd it cannot verify fails the query at its first trigger.
5. Credentials in `writeAheadLocation`: before, they were copied into every batch's offset (the checkpoint's
   offsets/, the query progress) and into error messages; now they appear in none of them.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyspark.errors import PythonException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from nsqd_py.client.protocol import mpub_body
from nsqd_py.spark.options import OptionError, ReadOptions
from nsqd_py.spark.reader import NSQStreamReader
from nsqd_py.spark.storage import redact
from nsqd_py.testing import free_port
from tests.security.certs import Pki, make_pki
from tests.spark.util import bodies, drained, http_address, publish, source_options, topic_depth
from tests.support import NsqdProcess, channel_stats

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def stream(spark: SparkSession, tcp: str, topic: str, tmp_path: Path, **options: str) -> DataFrame:
    reader = (spark.readStream.format("nsq").option("subscribe", topic).option("channel", "c")
              .option("nsqdTcpAddresses", tcp).option("writeAheadLocation", str(tmp_path / "wal"))
              .option("pollTimeout", "300ms"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def read_available(frame: DataFrame, checkpoint: Path, table: str) -> list[bytes]:
    """Run ``frame`` to a memory table with availableNow; the bodies it read."""
    query = (frame.writeStream.format("memory").queryName(table).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None
    return [row.body for row in frame.sparkSession.sql(f"SELECT body FROM {table}").collect()]


# -- 3. tls=true against an nsqd without TLS ------------------------------------------------------------------------

def test_tls_against_a_plain_nsqd_fails_the_read(spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str],
                                                 tmp_path: Path) -> None:
    """Before: the query read the messages over plaintext and ended well. After: its first batch fails, naming the
    option and nsqd, without the secret, and nothing was taken from the channel."""
    topic = name("plain_read")
    publish(nsqd, topic, bodies(3))
    frame = stream(spark, nsqd.tcp_address, topic, tmp_path, nsqdHttpAddresses=http_address(nsqd), tls="true",
                   authSecret="read-secret-31")
    query = (frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(180)
    message = str(failure.value)
    assert "option 'tls'" in message and nsqd.tcp_address in message
    assert "read-secret-31" not in message
    assert channel_stats(nsqd, topic, "c")["depth"] == 3


def test_tls_against_a_plain_nsqd_fails_the_write(spark: SparkSession, nsqd: NsqdProcess,
                                                  name: Callable[[str], str]) -> None:
    """Before: the rows were published over plaintext. After: the write fails before anything is sent."""
    topic = name("plain_write")
    publish(nsqd, topic, [b"exists"])  # the topic is there, so its depth tells what was published
    frame = spark.createDataFrame([("a",), ("b",)], StructType([StructField("value", StringType())]))
    with pytest.raises(PythonException) as failure:
        (frame.write.format("nsq").mode("append").option("topic", topic).option("nsqdTcpAddresses", nsqd.tcp_address)
         .option("tls", "true").option("authSecret", "write-secret-32").save())
    message = str(failure.value)
    assert "option 'tls'" in message and nsqd.tcp_address in message
    assert "write-secret-32" not in message
    assert topic_depth(nsqd, topic) == 1


# -- 4. an nsqd that requires TLS -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls_only(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[tuple[NsqdProcess, int]]:
    """An nsqd with --tls-required (TLS on TCP and HTTPS only: plain HTTP answers 403 with its https_port) that
    also requires a client certificate; and its HTTPS port."""
    https = free_port()
    proc = NsqdProcess(tmp_path_factory.mktemp("tls-only"), f"--tls-cert={pki.server_cert}",
                       f"--tls-key={pki.server_key}", f"--https-address=127.0.0.1:{https}", "--tls-required=true",
                       "--tls-client-auth-policy=require-verify", f"--tls-root-ca-file={pki.ca}").start()
    yield proc, https
    proc.stop()


def publish_https(https: int, pki: Pki, topic: str, messages: list[bytes]) -> None:
    resp = requests.post(f"https://127.0.0.1:{https}/mpub", params={"topic": topic, "binary": "true"},
                         data=mpub_body(messages), verify=str(pki.ca), cert=(str(pki.client_cert),
                                                                              str(pki.client_key)), timeout=10)
    resp.raise_for_status()


def tls_options(pki: Pki) -> dict[str, str]:
    return {"tls": "true", "tlsCaFile": str(pki.ca), "tlsCertFile": str(pki.client_cert),
            "tlsKeyFile": str(pki.client_key)}


@pytest.mark.parametrize("http", ["plain", "https"])
def test_an_nsqd_requiring_tls_is_read(spark: SparkSession, tls_only: tuple[NsqdProcess, int], pki: Pki,
                                       name: Callable[[str], str], tmp_path: Path, http: str) -> None:
    """Before: the survey's plain HTTP got 403 (a host:port address), or it failed verifying nsqd and sent no client
    certificate (an https:// address), so availableNow failed and any other trigger read nothing. After: from the
    plain address the survey follows nsqd's 403 to its HTTPS port; given as https://, it goes there; either way with
    the CA and client certificate of the reads."""
    node, https = tls_only
    topic = name(f"tls_{http}")
    publish_https(https, pki, topic, bodies(20))
    address = f"https://127.0.0.1:{https}" if http == "https" else http_address(node)
    frame = stream(spark, node.tcp_address, topic, tmp_path, nsqdHttpAddresses=address, **tls_options(pki))
    assert sorted(read_available(frame, tmp_path / "cp", f"tls_{http}")) == sorted(bodies(20))


def test_an_https_survey_without_the_ca_fails_the_query(spark: SparkSession, tls_only: tuple[NsqdProcess, int],
                                                        pki: Pki, name: Callable[[str], str], tmp_path: Path) -> None:
    """Before: the survey's failure counted as an nsqd that is down: skipped with a warning every trigger, reading
    nothing, forever. After: the query fails at its first trigger, naming the TLS options."""
    node, https = tls_only
    topic = name("tls_no_ca")
    publish_https(https, pki, topic, bodies(2))
    frame = stream(spark, node.tcp_address, topic, tmp_path, tls="true", tlsCertFile=str(pki.client_cert),
                   tlsKeyFile=str(pki.client_key), nsqdHttpAddresses=f"https://127.0.0.1:{https}")
    query = frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    try:
        with pytest.raises(StreamingQueryException, match=r"(?s)certificate verify failed.*'tlsCaFile'"):
            query.awaitTermination(60)
    finally:
        query.stop()


def test_tls_required_without_tls_fails_the_query(tls_only: tuple[NsqdProcess, int], name: Callable[[str], str],
                                                  tmp_path: Path) -> None:
    """The survey of an nsqd that requires TLS, by a reader without `tls`: a clear error, not a skipped nsqd (at the
    first start, which asks each nsqd whether its topics retain history, or at the first survey)."""
    node, _ = tls_only
    reader = NSQStreamReader(ReadOptions.parse(source_options(node, name("no_tls"), writeAheadLocation=str(tmp_path))))
    with pytest.raises(OptionError, match=r"requires TLS .*set 'tls'"):
        start = reader.initialOffset()
        reader.latestOffset(start, reader.getDefaultReadLimit())


# -- 5. credentials in writeAheadLocation -----------------------------------------------------------------------------

SECRETS = ("FAKE-SAS-SIG-51", "FAKE-CLIENT-SECRET-52", "FAKE-TOKEN-53", "FAKE-PASSWORD-54")


def secret_location(directory: Path) -> str:
    """A local write-ahead location with pyarrow URI options that carry secrets (a local file:// URI takes them)."""
    return (f"file://{directory}?sv=2024-11-04&sig={SECRETS[0]}&client_secret={SECRETS[1]}"
            f"&sas_token={SECRETS[2]}")


def leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def files_text(directory: Path) -> str:
    return "\n".join(path.read_bytes().decode("utf-8", "replace") for path in directory.rglob("*") if path.is_file())


def test_secrets_in_the_location_stay_out_of_offsets_progress_and_restarts(
        spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """Before: every offset held the location as typed, so the checkpoint and every progress carried the secrets.
    After: the offsets hold it redacted, and the query (restarted from its checkpoint too) reads with the real one."""
    topic, checkpoint, out = name("wal_secret"), tmp_path / "cp", tmp_path / "out"
    location = secret_location(tmp_path / "wal")

    def run(count: int, prefix: str) -> None:
        publish(nsqd, topic, bodies(count, prefix=prefix))
        frame = (spark.readStream.format("nsq").options(**source_options(nsqd, topic, writeAheadLocation=location))
                 .load())
        query = (frame.writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert query.awaitTermination(180)
        assert query.exception() is None
        progress = "\n".join(p.json for p in [query.lastProgress, *query.recentProgress])
        assert leaked(progress) == [] and "<redacted>" in progress

    run(5, "first")
    run(4, "again")  # a restart from the checkpoint
    read = [row.body for row in spark.read.parquet(str(out)).collect()]
    assert sorted(read) == sorted(bodies(5, prefix="first") + bodies(4, prefix="again"))
    assert drained(nsqd, topic, "c")
    assert leaked(files_text(checkpoint)) == []
    assert any((tmp_path / "wal").iterdir())  # the slices went to the real location


def test_an_offset_of_the_earlier_versions_still_replays(nsqd: NsqdProcess, name: Callable[[str], str],
                                                         tmp_path: Path) -> None:
    """A checkpoint written before: its offsets hold the location as typed, secrets and all. Its batch replays
    from there, and the offsets planned from then on hold it redacted."""
    topic = name("wal_old")
    location = secret_location(tmp_path / "wal")
    reader = NSQStreamReader(ReadOptions.parse(source_options(nsqd, topic, writeAheadLocation=location)))
    start = reader.initialOffset()
    assert leaked(json.dumps(start)) == []
    publish(nsqd, topic, bodies(2))
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    old_start, old_end = {**start, "location": location}, {**end, "location": location}
    restarted = NSQStreamReader(ReadOptions.parse(source_options(nsqd, topic, writeAheadLocation=location)))
    parts = restarted.partitions(old_start, old_end)
    assert {part.plan.location for part in parts} == {location}
    rows = pa.Table.from_batches([b for part in parts for b in restarted.read(part)])
    assert sorted(rows.column("body").to_pylist()) == sorted(bodies(2))
    restarted.commit(old_end)
    publish(nsqd, topic, bodies(1, prefix="later"))
    later = restarted.latestOffset(old_end, restarted.getDefaultReadLimit())
    assert later["batch"] == 2 and leaked(json.dumps(later)) == []


def test_an_offset_in_a_location_whose_credentials_are_gone_fails_clearly(nsqd: NsqdProcess, tmp_path: Path) -> None:
    """A batch planned in another location that had secrets: the offset no longer says them, so say which location
    to give again (redacted), rather than read from the wrong place."""
    other = NSQStreamReader(ReadOptions.parse(source_options(nsqd, "t", writeAheadLocation=secret_location(
        tmp_path / "old"))))
    offset = other.initialOffset()
    reader = NSQStreamReader(ReadOptions.parse(source_options(nsqd, "t", writeAheadLocation=str(tmp_path / "new"))))
    with pytest.raises(OptionError, match="writeAheadLocation") as failure:
        reader.partitions(offset, {**offset, "batch": 1, "slices": [["t", nsqd.tcp_address, 0, 1, 0]]})
    assert leaked(str(failure.value)) == []


@pytest.mark.parametrize(("typed", "shown"), [
    ("abfss://lake@acct.dfs.core.windows.net/wa?sv=2024-11-04&sp=rwdl&sig=c2ln",
     "abfss://lake@acct.dfs.core.windows.net/wa?sv=2024-11-04&sp=rwdl&sig=<redacted>"),
    ("abfs://acct.dfs.core.windows.net/lake/wa?client_id=app&client_secret=s3&tenant_id=t",
     "abfs://acct.dfs.core.windows.net/lake/wa?client_id=app&client_secret=<redacted>&tenant_id=t"),
    ("abfs://acct:KEY@127.0.0.1:10000/lake/wa", "abfs://<redacted>@127.0.0.1:10000/lake/wa"),
    ("s3a://AKIAEXAMPLE:secret/key@bucket/wa?region=eu-west-1", "s3a://<redacted>@bucket/wa?region=eu-west-1"),
    ("s3://bucket/wa?access_key=A&secret_key=S&session_token=T&endpoint_override=minio:9000",
     "s3://bucket/wa?access_key=<redacted>&secret_key=<redacted>&session_token=<redacted>&endpoint_override=minio:9000"),
    ("gs://bucket/wa?access_token=ya29&credential_token_expiration=2026",
     "gs://bucket/wa?access_token=<redacted>&credential_token_expiration=<redacted>"),
    ("wasbs://lake@acct.blob.core.windows.net/wa", "wasbs://lake@acct.blob.core.windows.net/wa"),
    ("hdfs://namenode:8020/wa", "hdfs://namenode:8020/wa"),
    ("/data/wa?secret=not-a-uri", "/data/wa?secret=not-a-uri"),
])
def test_what_is_redacted(typed: str, shown: str) -> None:
    """Userinfo with a password (and any on S3, whose user is the access key), and every query option whose name
    suggests a secret; names of containers and accounts, and plain paths, stay."""
    assert redact(typed) == shown
    assert redact(shown) == shown


def test_an_error_about_the_location_carries_no_secret(nsqd: NsqdProcess, tmp_path: Path) -> None:
    """pyarrow refuses a local URI with a password, echoing the URI: before, the error (and the traceback Spark
    shows) carried the password and the query's options; after, they are redacted."""
    location = f"file://someone:{SECRETS[3]}@{tmp_path}/wal?client_secret={SECRETS[1]}"
    with pytest.raises(OptionError) as failure:
        NSQStreamReader(ReadOptions.parse(source_options(nsqd, "t", writeAheadLocation=location)))
    shown = "".join(traceback.format_exception(failure.value))
    assert "cannot open" in shown and leaked(shown) == []


def test_spark_shows_no_secret_of_a_failing_location(spark: SparkSession, nsqd: NsqdProcess,
                                                     name: Callable[[str], str], tmp_path: Path) -> None:
    """The same through Spark: the query's error, with the Python traceback it carries."""
    location = f"file://someone:{SECRETS[3]}@{tmp_path}/wal?sas_token={SECRETS[2]}"
    frame = (spark.readStream.format("nsq")
             .options(**source_options(nsqd, name("wal_fail"), writeAheadLocation=location)).load())
    query = frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(120)
    assert "write-ahead location" in str(failure.value) and leaked(str(failure.value)) == []
