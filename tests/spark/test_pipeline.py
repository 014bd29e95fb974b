"""The pipeline app: NSQ topics -> Parquet events by date/hour plus watermarked per-minute counts per topic, and the
same layout from nsq_to_file archives."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nsqd_py.apps.pipeline import config, parse_args, run
from pyspark.sql import SparkSession

from nsqd_py.spark.archive import ArchiveError, run_archive
from nsqd_py.spark.pipeline import PipelineConfig
from tests.spark.util import drained, http_address, publish
from tests.support import NsqdProcess, find_channel, wait_until

pytestmark = pytest.mark.slow

SCHEMA = "user string, amount double, ts timestamp"
BASE = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def events(count: int, step: float, user: str) -> list[dict]:
    return [{"user": user, "amount": i / 2, "ts": (BASE + timedelta(seconds=i * step)).isoformat()}
            for i in range(count)]


def minute(ts: str) -> str:
    return datetime.fromisoformat(ts).strftime("%Y-%m-%d %H:%M")


def read_counts(spark: SparkSession, path: str) -> dict[tuple[str, str], int]:
    """(minute as text in the session time zone, topic) -> count; Python would render timestamps in local time."""
    rows = spark.read.parquet(path).selectExpr("date_format(minute, 'yyyy-MM-dd HH:mm') AS m", "topic", "count")
    return {(r.m, r.topic): r["count"] for r in rows.collect()}


def test_cli_arguments_map_to_the_config(spark: SparkSession) -> None:  # parsing DDL needs the JVM
    args = parse_args(["--topic", "a", "--topic", "b", "--lookupd-http-address", "h:4161", "--output", "/lake",
                       "--schema", SCHEMA, "--max-messages-per-batch", "50", "--msg-timeout", "5s",
                       "--source-option", "snappy=true", "--available-now"])
    cfg = config(args)
    assert cfg.topics == ["a", "b"] and cfg.lookupd_http_addresses == ["h:4161"]
    assert cfg.source_options == {"snappy": "true", "maxOffsetsPerTrigger": "50", "msgTimeout": "5s"}
    assert cfg.events_path == "/lake/events" and cfg.checkpoint_path("counts") == "/lake/_checkpoints/counts"
    assert cfg.dedupe_window == "5 minutes"
    assert not config(parse_args(["--topic", "a", "--nsqd-tcp-address", "h:1", "--output", "/l",
                                  "--dedupe-window", ""])).dedupe_window
    with pytest.raises(SystemExit):
        parse_args(["--topic", "a", "--output", "/lake"])  # neither nsqd nor lookupd
    with pytest.raises(ValueError, match="nsq_topic"):
        PipelineConfig(topics=["a"], output="/x", schema="nsq_topic string").body_schema()


@pytest.mark.parametrize(("argv", "message"), [
    (["--topic", "a", "--nsqd-tcp-address", "h:1"], "--output is required"),
    (["--output", "/l", "--nsqd-tcp-address", "h:1"], "--topic is required (unless --from-archive)"),
    (["--topic", "a", "--nsqd-tcp-address", "h:1", "--output", "/l", "--conf", "novalue"],
     "expected KEY=VALUE, got 'novalue'"),
    (["--topic", "a", "--nsqd-tcp-address", "h:1", "--output", "/l", "--schema", "a int", "--schema-file", "f"],
     "give --schema or --schema-file (not both)"),
    (["--topic", "a", "--nsqd-tcp-address", "h:1", "--nsqd-tcp-address", "h:2", "--nsqd-http-address", "h:3",
      "--output", "/l"], "give one --nsqd-http-address per --nsqd-tcp-address"),
    (["--topic", "a", "--nsqd-tcp-address", "h:1", "--output", "/l", "extra"], "unexpected arguments: extra"),
])
def test_cli_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err == f"nsq-pipeline: {message}\n"


def test_cli_reads_the_schema_file_and_spark_conf(tmp_path: Path) -> None:
    ddl = tmp_path / "events.ddl"
    ddl.write_text("user string, ts timestamp\n")
    opts = parse_args(["--from-archive", "/arch", "--output", "/l", "--schema-file", str(ddl),
                       "--conf", "spark.x=1=2", "--master", "local[1]"])
    assert config(opts).schema == "user string, ts timestamp"
    assert opts.spark_conf == {"spark.x": "1=2"} and opts.master == "local[1]" and opts.from_archive == "/arch"


def test_stream_pipeline_writes_events_and_minute_counts(spark: SparkSession, nsqd: NsqdProcess,
                                                         name: Callable[[str], str], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    clicks, views = name("clicks"), name("views")
    sent = {clicks: events(240, 2.0, "ann"), views: events(90, 4.0, "bob")}  # 8 and 6 minutes of event time
    publish(nsqd, clicks, [json.dumps(e).encode() for e in sent[clicks]] + [b"not json"])
    publish(nsqd, views, [json.dumps(e).encode() for e in sent[views]])
    cfg = PipelineConfig(topics=[clicks, views], output=str(tmp_path / "lake"), nsqd_tcp_addresses=[nsqd.tcp_address],
                         nsqd_http_addresses=[http_address(nsqd)],
                         schema=SCHEMA, event_time_field="ts", watermark="1 minute", available_now=True,
                         source_options={"maxOffsetsPerTrigger": "400", "idleTimeout": "5s"})

    run(spark, cfg, threading.Event())

    stored = spark.read.parquet(cfg.events_path)
    rows = stored.collect()
    assert len(rows) == 331 and len({r.nsq_id for r in rows}) == 331
    assert [r._corrupt_record for r in rows if r._corrupt_record] == ["not json"]
    parsed = [r for r in rows if r.user]
    assert Counter(r.nsq_topic for r in parsed) == {clicks: 240, views: 90}
    assert sorted(r.amount for r in parsed if r.nsq_topic == views) == [i / 2 for i in range(90)]
    partitions = {(str(r.date), r.hour) for r in parsed}  # (partition discovery reads date=... as a date)
    assert partitions == {("2026-01-01", 10)}
    assert (Path(cfg.events_path) / "date=2026-01-01" / "hour=10").is_dir()

    # a minute is final once the watermark (latest event time - 1 minute) has passed its end
    watermark = max(datetime.fromisoformat(e["ts"]) for es in sent.values() for e in es) - timedelta(minutes=1)
    expected = Counter((minute(e["ts"]), topic) for topic, es in sent.items() for e in es)
    # (the body that is not JSON counts at its publish time, today)
    counts = {k: v for k, v in read_counts(spark, cfg.counts_path).items() if k[0].startswith("2026-01-01")}
    closed = {k: v for k, v in expected.items() if k[0] <= minute((watermark - timedelta(minutes=1)).isoformat())}
    assert len(closed) >= 10
    assert {k: v for k, v in counts.items() if k in closed} == closed
    assert all(counts[k] == expected[k] for k in counts)

    for topic in sent:
        wait_until(lambda topic=topic: drained(nsqd, topic, cfg.channel), timeout=10)
    progress = capsys.readouterr().out
    assert "[events] batch 0: " in progress and "rows/s" in progress and "[counts] batch 0: " in progress
    assert re.search(r"\[events\] batch \d+: .* \d+ waiting in nsqd", progress)  # the lag, from /stats


def test_sigkill_and_restart_keep_events_and_counts_exact(spark: SparkSession, nsqd: NsqdProcess,
                                                          name: Callable[[str], str], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    topic, count = name("crash"), 1000
    sent = events(count, 0.5, "eve")  # 8 minutes and a bit of event time
    publish(nsqd, topic, [json.dumps(e).encode() for e in sent])
    argv = ["--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address, "--nsqd-http-address", http_address(nsqd),
            "--output", str(tmp_path / "lake"),
            "--schema", SCHEMA, "--event-time-field", "ts", "--watermark", "1 minute", "--msg-timeout", "2s",
            "--max-messages-per-batch", "200", "--source-option", "idleTimeout=5s"]
    # killed between triggers or mid-batch: a batch under way is replayed from its slices, nothing is redelivered
    proc = subprocess.Popen([str(Path(sys.executable).parent / "nsq-pipeline"), *argv, "--master", "local[2]",
                             "--trigger", "5 seconds", "--conf", "spark.ui.enabled=false"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        for line in proc.stdout or ():  # "[events] batch 2: 200 rows, ..." (the first batches overrun the trigger)
            if line.startswith("[events] batch ") and int(line.split()[2][:-1]) >= 2 and " 0 rows" not in line:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    before = spark.read.parquet(str(tmp_path / "lake" / "events")).count()
    assert 0 < before < count

    run(spark, config(parse_args([*argv, "--available-now"])), threading.Event())  # same checkpoint

    rows = spark.read.parquet(str(tmp_path / "lake" / "events")).select("nsq_id", "user").collect()
    assert len(rows) == count and len({r.nsq_id for r in rows}) == count
    read_again = sum(int(line.split(": ")[1].split()[0]) for line in capsys.readouterr().out.splitlines()
                     if line.startswith("[events]"))
    assert read_again == count - before  # each message read once: committed batches are not read again
    watermark = datetime.fromisoformat(sent[-1]["ts"]) - timedelta(minutes=1)
    closed = minute((watermark - timedelta(minutes=1)).isoformat())  # the last minute that ended before it
    expected = Counter(minute(e["ts"]) for e in sent if minute(e["ts"]) <= closed)
    counts = read_counts(spark, str(tmp_path / "lake" / "counts"))
    assert len(expected) >= 6 and {m: n for (m, _), n in counts.items() if m in expected} == expected
    wait_until(lambda: drained(nsqd, topic, "nsq_pipeline"), timeout=10)


def test_sigterm_to_the_whole_service_stops_cleanly(spark: SparkSession, nsqd: NsqdProcess,
                                                    name: Callable[[str], str], tmp_path: Path) -> None:
    """systemd (KillMode=control-group), `timeout` and `kill -- -PGID` signal the JVM and the reader's process too;
    the stop must still commit what was written and hand back the rest, not leave it for msg_timeout."""
    topic = name("groupterm")
    publish(nsqd, topic, [json.dumps({"n": i}).encode() for i in range(100)])
    lake = tmp_path / "lake"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "nsq-pipeline"), "--topic", topic,
                             "--nsqd-tcp-address", nsqd.tcp_address, "--nsqd-http-address", http_address(nsqd),
                             "--output", str(lake), "--schema", "n int",
                             "--master", "local[2]", "--conf", "spark.ui.enabled=false"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in proc.stdout or ():
            if line.startswith("[events] batch ") and " 0 rows" not in line:
                break
        publish(nsqd, topic, [json.dumps({"n": i}).encode() for i in range(100, 150)])
        os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert proc.returncode == 0, stderr[-3000:]
    stored = sorted(r.n for r in spark.read.parquet(str(lake / "events")).collect())
    assert len(stored) == len(set(stored)) >= 100
    # at once, not after msg_timeout (60 s): FINed what is stored, handed back the rest, and disconnected
    wait_until(lambda: not (channel := find_channel(nsqd, topic, "nsq_pipeline"))["clients"]
               and channel["in_flight_count"] == 0, timeout=10)
    assert find_channel(nsqd, topic, "nsq_pipeline")["depth"] == 150 - len(stored)


HIDE_NSQD_PY = """#!{python}
import importlib.abc, runpy, sys


class NoNsqdPy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "nsqd_py":
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, NoNsqdPy())
flag, target, *rest = sys.argv[1:]  # Spark runs `python -c <version check>` and `python -m pyspark.<worker>`
sys.argv = [target, *rest]
if flag == "-c":
    exec(target)
else:
    runpy.run_module(target, run_name="__main__", alter_sys=True)
"""


def test_app_says_so_when_sparks_python_cannot_import_nsqd_py(nsqd: NsqdProcess, name: Callable[[str], str],
                                                              tmp_path: Path) -> None:
    """A cluster node's interpreter without nsqd-py, played by one that refuses to import it: Spark plans the data
    source there, and the app stops at start with the fix instead of a Java stack trace."""
    python = tmp_path / "python-without-nsqd-py"
    python.write_text(HIDE_NSQD_PY.format(python=sys.executable))
    python.chmod(0o755)
    result = subprocess.run([str(Path(sys.executable).parent / "nsq-pipeline"), "--topic", name("noimport"),
                             "--nsqd-tcp-address", nsqd.tcp_address, "--nsqd-http-address", http_address(nsqd),
                             "--output", str(tmp_path / "lake"),
                             "--master", "local[1]", "--conf", f"spark.pyspark.python={python}",
                             "--conf", "spark.ui.enabled=false"],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 1
    assert "Spark could not import nsqd_py with the Python it runs for the data source" in result.stderr
    assert f"({python})" in result.stderr


def write_archive(nsqd: NsqdProcess, topic: str, bodies: list[bytes], directory: Path) -> list[Path]:
    """nsq_to_file --gzip when it is installed, else gzip files in its naming."""
    tool = Path(sys.executable).parent / "nsq_to_file"
    if not tool.exists() or subprocess.run([tool, "--version"], capture_output=True, timeout=30).returncode:
        hour = datetime.now().strftime("%Y-%m-%d_%H")
        path = directory / f"{topic}.{os.uname().nodename.split('.')[0]}-000000.{hour}.log.gz"
        with gzip.open(path, "wb") as f:
            f.write(b"".join(b + b"\n" for b in bodies))
        return [path]
    proc = subprocess.Popen([str(tool), f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                             f"--output-dir={directory}", "--gzip", "--sync-interval=500ms"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: find_channel(nsqd, topic, "nsq_to_file"), timeout=30)
        publish(nsqd, topic, bodies)
        wait_until(lambda: drained(nsqd, topic, "nsq_to_file"), timeout=30)  # FINed after fsync
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return sorted(directory.glob("*.log.gz"))


def test_archive_mode_writes_the_same_layout(spark: SparkSession, nsqd: NsqdProcess, name: Callable[[str], str],
                                             tmp_path: Path) -> None:
    topic = name("archived")
    sent = events(150, 3.0, "cat")
    archive = tmp_path / "archive"
    archive.mkdir()
    files = write_archive(nsqd, topic, [json.dumps(e).encode() for e in sent], archive)
    assert files and all(f.name.startswith(f"{topic}.") for f in files)
    (archive / "unrelated.txt").write_text("not an archive\n")
    cfg = PipelineConfig(topics=[], output=str(tmp_path / "lake"), schema=SCHEMA, event_time_field="ts")

    assert run_archive(spark, cfg, str(archive)) == len(sent)

    rows = spark.read.parquet(cfg.events_path).selectExpr(
        "date_format(ts, \"yyyy-MM-dd'T'HH:mm:ss\") AS ts", "date_format(nsq_timestamp, 'yyyy-MM-dd_HH') AS hour_file",
        "nsq_topic", "date", "hour", "nsq_id").collect()
    assert sorted(r.ts for r in rows) == sorted(e["ts"][:19] for e in sent)
    assert {(r.nsq_topic, str(r.date), r.hour, r.nsq_id) for r in rows} == {(topic, "2026-01-01", 10, None)}
    assert {r.hour_file for r in rows} == {files[0].name.rsplit(".", 3)[1]}  # the hour in the file name
    assert read_counts(spark, cfg.counts_path) == Counter((minute(e["ts"]), topic) for e in sent)


def test_archive_mode_refuses_a_streaming_output(spark: SparkSession, tmp_path: Path) -> None:
    cfg = PipelineConfig(topics=[], output=str(tmp_path / "lake"))
    (Path(cfg.events_path) / "_spark_metadata").mkdir(parents=True)
    with pytest.raises(ArchiveError, match="streaming query"):
        run_archive(spark, cfg, str(tmp_path))

