"""One local[2] SparkSession for the whole test run and one nsqd shared by the Spark tests (distinct topics); a Spark
test that failed only because Spark's Python worker started too slowly runs once more."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from nsqd_py.spark import register
from tests.support import NsqdProcess

#: Spark gives a Python worker it starts 10 s (fixed in its PythonWorkerFactory) to connect back; on a 2-core machine
#: running four test processes, an executor's worker importing pyspark sometimes needs longer and the query fails
#: with this text. It is the machine, not the data source: such a failure gets one more run, nothing else does.
WORKER_START_TIMEOUT = "Python worker failed to connect back"

#: every JVM the Spark tests start (the session's, spark-submit's, a cluster's daemons and executors) compiles with C1
#: only and collects with one thread: they live for seconds on small data, and this cuts their CPU by a quarter
#: (tests/spark/test_write.py on 2 cores: 41-44 s of CPU instead of 56-57), which the other test workers get
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in item.nodeid:
            item.add_marker(pytest.mark.flaky(reruns=1, only_rerun=[WORKER_START_TIMEOUT]))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """Executors' Python workers must run the venv's interpreter, which has nsqd_py installed."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("the Spark tests need a Java runtime")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("nsqd-py-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsqdProcess]:
    proc = NsqdProcess(tmp_path_factory.mktemp("spark-nsqd")).start()
    yield proc
    proc.stop()





@pytest.fixture(scope="session")
def small_rdy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsqdProcess]:
    """An nsqd whose max RDY of 50 makes a task's chunks 50 messages long."""
    proc = NsqdProcess(tmp_path_factory.mktemp("small-rdy"), "--max-rdy-count=50").start()
    yield proc
    proc.stop()
