"""A Spark standalone cluster from the pyspark package (Master and Worker JVMs on 127.0.0.1, executors in the
Worker's): nsq-pipeline submitted with the README's recipe reads a topic into Parquet, and a submitted batch write
publishes to a topic. Only `spark.pyspark.python` tells Spark where nsqd_py is; PYSPARK_PYTHON is not set."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest
import requests
from pyspark.sql import SparkSession

from tests.spark.util import drained, http_address, publish
from tests.support import NsqdProcess, drain, free_port, wait_until

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
        _spark_class("org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2", "--memory",
                     "1g", "--webui-port", str(free_port()), "--work-dir", str(work)),
    ]
    try:
        wait_until(lambda: _alive_workers(ui) > 0, timeout=90, interval=0.5)
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


def spark_submit(cluster: str, *args: str) -> None:
    """As in the README: an absolute interpreter path that exists on the driver and on every executor."""
    subprocess.run([str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster,
                    "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.executor.memory=512m",
                    "--conf", "spark.ui.enabled=false", *args],
                   env=submit_env(), check=True, timeout=SUBMIT_TIMEOUT, stdout=subprocess.DEVNULL)


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
                 "--schema", "n int", "--available-now", "--source-option", "idle_timeout=5s")

    assert sorted(r.n for r in spark.read.parquet(str(lake / "events")).collect()) == list(range(count))
    wait_until(lambda: drained(nsqd, topic, "nsq_pipeline"), timeout=10)

    written = name("cluster_out")
    spark_submit(cluster, str(Path(__file__).with_name("cluster_write.py")), written, nsqd.tcp_address, str(count))

    bodies = [m.body for m in drain(nsqd.tcp_port, written, "check", idle=1.5, rdy=2500)]
    assert sorted(int(b) for b in bodies) == list(range(count))
