"""A Spark standalone cluster from the pyspark package (a Master and two Worker JVMs on 127.0.0.1, executors in the
Workers'), with two nsqd: nsq-pipeline submitted as docs/spark.md says reads a topic into Parquet, a submitted batch
write publishes to a topic, and streaming reads happen in the executors: an executor or the driver killed with
SIGKILL mid-batch loses nothing, and a batch replayed after the driver's restart holds the same messages. Only
`spark.pyspark.python` tells Spark where nsqd_py is; PYSPARK_PYTHON is not set."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
import requests
from pyspark.sql import SparkSession

from nsqd_py.spark.slices import SliceStore
from nsqd_py.testing import free_port
from tests.spark.util import drained, http_address, publish
from tests.support import NsqdProcess, drain, find_channel, wait_until

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
#: the pip package is a Spark distribution (bin/, jars/); its scripts look for it with `python3` unless told
SPARK_HOME = Path(pyspark.__file__).parent
SUBMIT_TIMEOUT = 300


def submit_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    return {**env, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The master's URL once a worker has registered."""
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    work = tmp_path_factory.mktemp("spark-worker")
    daemons = [
        _spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(ui)),
        *(_spark_class("org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1", "--memory",
                       "1g", "--webui-port", str(free_port()), "--work-dir", str(work / str(i))) for i in range(2)),
    ]
    try:
        wait_until(lambda: _alive_workers(ui) == 2, timeout=120, interval=0.5)
        yield url
    finally:
        for proc in daemons:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)


def _spark_class(*args: str) -> subprocess.Popen:
    return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=submit_env(),
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _alive_workers(ui: int) -> int:
    try:
        return int(requests.get(f"http://127.0.0.1:{ui}/json/", timeout=2).json().get("aliveworkers", 0))
    except (requests.RequestException, ValueError):
        return 0


def submit_args(cluster: str, *args: str) -> list[str]:
    """As in docs/spark.md: an absolute interpreter path that exists on the driver and on every executor."""
    return [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster,
            "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.executor.memory=512m",
            "--conf", "spark.ui.enabled=false", *args]


def spark_submit(cluster: str, *args: str) -> None:
    subprocess.run(submit_args(cluster, *args), env=submit_env(), check=True, timeout=SUBMIT_TIMEOUT,
                   stdout=subprocess.DEVNULL)


def test_pipeline_reads_and_a_job_writes_through_a_standalone_cluster(cluster: str, spark: SparkSession,
                                                                     nsqd: NsqdProcess, name: Callable[[str], str],
                                                                     tmp_path: Path) -> None:
    topic, count = name("cluster"), 300
    publish(nsqd, topic, [json.dumps({"n": i}).encode() for i in range(count)])
    app = subprocess.run([str(BIN / "nsq-pipeline"), "--print-path"], capture_output=True, text=True,
                         check=True).stdout.strip()
    lake = tmp_path / "lake"

    spark_submit(cluster, app, "--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address,
                 "--nsqd-http-address", http_address(nsqd), "--output", str(lake),
                 "--schema", "n int", "--available-now", "--source-option", "idleTimeout=5s")

    assert sorted(r.n for r in spark.read.parquet(str(lake / "events")).collect()) == list(range(count))
    wait_until(lambda: drained(nsqd, topic, "nsq_pipeline"), timeout=10)

    written = name("cluster_out")
    spark_submit(cluster, str(Path(__file__).with_name("cluster_write.py")), written, nsqd.tcp_address, str(count))

    bodies = [m.body for m in drain(nsqd.tcp_port, written, "check", idle=1.5, rdy=2500)]
    assert sorted(int(b) for b in bodies) == list(range(count))


READ_APP = str(Path(__file__).with_name("cluster_read.py"))


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NsqdProcess]]:
    """Two nsqd whose max RDY of 5 makes a task read in chunks of 5 messages, so that its subscription lasts long
    enough to be seen (and killed) mid-batch."""
    started = [NsqdProcess(tmp_path_factory.mktemp("cluster-nsqd"), "--max-rdy-count=5").start() for _ in range(2)]
    yield started
    for node in started:
        node.stop()


def publish_to_each(nodes: list[NsqdProcess], topic: str, count: int) -> set[bytes]:
    sent: set[bytes] = set()
    for i, node in enumerate(nodes):
        bodies = [f"{i}-{n}".encode() for n in range(count)]
        publish(node, topic, bodies)
        sent.update(bodies)
    return sent


def read_app(cluster: str, nodes: list[NsqdProcess], topic: str, out: Path, delay_ms: int, *options: str) -> list[str]:
    """cluster_read.py's command line; the checkpoint and write-ahead location sit beside ``out``."""
    return submit_args(cluster, READ_APP, topic, ",".join(n.tcp_address for n in nodes),
                       ",".join(http_address(n) for n in nodes), str(out), str(out.parent / "checkpoint"),
                       str(out.parent / "write-ahead"), str(delay_ms), *options)


def owner(local_port: int, remote_port: int) -> psutil.Process | None:
    """The process holding a TCP connection from ``local_port`` to ``remote_port`` on this host."""
    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.raddr and conn.laddr.port == local_port and conn.raddr.port == remote_port and conn.pid:
            with contextlib.suppress(psutil.NoSuchProcess):
                return psutil.Process(conn.pid)
    return None


def executor_of(process: psutil.Process) -> psutil.Process | None:
    """The executor JVM a process belongs to (its Python workers are the JVM's descendants)."""
    for candidate in [process, *process.parents()]:
        if "CoarseGrainedExecutorBackend" in " ".join(candidate.cmdline()):
            return candidate
    return None


def readers(nodes: list[NsqdProcess], topic: str) -> list[psutil.Process]:
    """The processes whose connections nsqd has delivered messages to, right now."""
    found = []
    for node in nodes:
        for client in (find_channel(node, topic, "spark") or {}).get("clients") or []:
            port = int(client["remote_address"].rpartition(":")[2])
            process = owner(port, node.tcp_port) if client["message_count"] else None
            if process is not None:
                found.append(process)
    return found


def test_executors_read_and_an_executor_killed_mid_batch_loses_nothing(cluster: str, spark: SparkSession,
                                                                       nodes: list[NsqdProcess],
                                                                       name: Callable[[str], str],
                                                                       tmp_path: Path) -> None:
    topic = name("executors")
    sent = publish_to_each(nodes, topic, 4000)
    out = tmp_path / "out"
    command = read_app(cluster, nodes, topic, out, 1, "maxOffsetsPerTrigger=2000", "minPartitions=4")
    app = subprocess.Popen(command, env=submit_env(), start_new_session=True, stdout=subprocess.DEVNULL)
    seen: list[tuple[bool, bool]] = []  # for each process nsqd delivered to: an executor's? the driver's?
    killed: psutil.Process | None = None
    orphans: set[int] = set()  # the killed executor's Python workers: they outlive it briefly, with no parent JVM
    try:
        deadline = time.monotonic() + SUBMIT_TIMEOUT
        while app.poll() is None and time.monotonic() < deadline:
            executors = []
            for process in readers(nodes, topic):
                with contextlib.suppress(psutil.NoSuchProcess):
                    if process.pid in orphans:
                        continue
                    executor = executor_of(process)
                    seen.append((executor is not None, os.getsid(process.pid) == app.pid))  # the driver's session
                    executors += [executor] if executor is not None else []
            if killed is None and executors:
                killed = executors[0]
                orphans = {child.pid for child in killed.children(recursive=True)}
                killed.kill()  # SIGKILL, mid-batch: it is reading right now
            time.sleep(0.05)
        assert app.wait(30) == 0
    finally:
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
    assert killed is not None and seen
    assert all(executor for executor, _ in seen)  # every connection that received messages is an executor's
    assert not any(driver for _, driver in seen)  # the driver holds no subscription

    # what the killed executor had delivered but not published comes back after msg_timeout: read it too
    wait_until(lambda: all((find_channel(n, topic, "spark") or {}).get("in_flight_count") == 0 for n in nodes),
               timeout=30)
    subprocess.run(read_app(cluster, nodes, topic, out, 0), env=submit_env(), check=True, timeout=SUBMIT_TIMEOUT,
                   stdout=subprocess.DEVNULL)
    rows = spark.read.parquet(str(out)).select("id", "body").collect()
    assert {r.body for r in rows} == sent  # nothing lost
    assert all(drained(n, topic, "spark") for n in nodes)


def offset_log(checkpoint: Path, batch: int) -> dict:
    """The source's offset in Spark's offset log for ``batch`` (line 3 of offsets/N)."""
    return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[2])


def uncommitted_batch_with_its_slices_written(checkpoint: Path, write_ahead: Path) -> tuple[int, dict] | None:
    offsets = checkpoint / "offsets"
    for batch in sorted(int(p.name) for p in offsets.glob("[0-9]*")) if offsets.exists() else []:
        if (checkpoint / "commits" / str(batch)).exists():
            continue
        offset = offset_log(checkpoint, batch)
        store = SliceStore(str(write_ahead), offset["query"])  # the source numbers its batches from Spark's + 1
        if offset["slices"] and len(store.finished_slices(offset["batch"])) == len(offset["slices"]):
            return batch, offset
    return None


def slice_ids(write_ahead: Path, query: str, batch: int) -> list[str]:
    tables = [pa.ipc.open_file(pa.memory_map(str(p))).read_all()
              for p in (write_ahead / query / f"{batch:012d}").rglob("*.arrow")]
    return sorted(i for t in tables for i in t.column("id").to_pylist())


def batch_ids(out: Path, batch: int) -> list[str]:
    """The ids the file sink committed for ``batch`` (its _spark_metadata log names the files)."""
    lines = (out / "_spark_metadata" / str(batch)).read_text().splitlines()[1:]
    paths = [json.loads(line)["path"].removeprefix("file://") for line in lines]
    return sorted(i for path in paths for i in pq.read_table(path, columns=["id"]).column("id").to_pylist())


def test_a_batch_replayed_after_the_driver_is_killed_holds_the_same_messages(cluster: str, spark: SparkSession,
                                                                            nodes: list[NsqdProcess],
                                                                            name: Callable[[str], str],
                                                                            tmp_path: Path) -> None:
    topic = name("replay")
    sent = publish_to_each(nodes, topic, 2000)
    out = tmp_path / "out"
    checkpoint, write_ahead = tmp_path / "checkpoint", tmp_path / "write-ahead"
    options = ("maxOffsetsPerTrigger=1500", "minPartitions=2")
    app = subprocess.Popen(read_app(cluster, nodes, topic, out, 2, *options), env=submit_env(),
                           start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        # the sink is slow (2 ms a row): the slices are written well before the batch commits
        batch, offset = wait_until(lambda: uncommitted_batch_with_its_slices_written(checkpoint, write_ahead),
                                   timeout=SUBMIT_TIMEOUT, interval=0.05)
        os.killpg(app.pid, signal.SIGKILL)
        app.wait(30)
    finally:
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
    assert not (checkpoint / "commits" / str(batch)).exists()
    first = slice_ids(write_ahead, offset["query"], offset["batch"])
    assert len(first) == 1500

    subprocess.run(read_app(cluster, nodes, topic, out, 0, *options), env=submit_env(), check=True,
                   timeout=SUBMIT_TIMEOUT, stdout=subprocess.DEVNULL)

    assert batch_ids(out, batch) == first  # the replay read the same slices
    rows = spark.read.parquet(str(out)).select("id", "body").collect()
    assert len(rows) == len(sent) and {r.body for r in rows} == sent  # exactly once, with no dedupe
    assert all(drained(n, topic, "spark") for n in nodes)
