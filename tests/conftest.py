"""The shared fixtures: the real nsqd process (installed console script) on free ports, or one in-process."""

from __future__ import annotations

import compileall
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from nsqd_py.go.durations import MINUTE
from nsqd_py.runtime.compiled_build import stale_message, stale_modules
from nsqd_py.runtime.pure_python import pure_requested
from tests.clients.util import IOLoopThread
from tests.inprocess import InProcessNsqd
from tests.support import NsqdProcess, unique

#: fixtures that start a real process (nsqd, nsqlookupd, gunicorn, a tool) or a client's event loop: a test that
#: uses one, or sits in a module with `pytestmark = pytest.mark.process`, is left out of `make check`
PROCESS_FIXTURES = frozenset({
    "nsqd_factory", "shared_nsqd", "lookupd", "lookupd_factory", "cluster_nsqd", "tls_nsqd", "auth_nsqd",
    "fuzz_nsqd", "unix_nsqd", "gunicorn_factory", "replayed", "small", "busy", "hostile", "tools", "io", "spark",
})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "process: starts a real process (left out of `make check`)")
    stale = [] if pure_requested(os.environ) else stale_modules()
    if stale:  # the suite would test the old compiled code, not the edit
        pytest.exit(stale_message(stale), returncode=2)
    if not hasattr(config, "workerinput"):  # xdist's controller (or a run without it), before any worker starts
        compile_sources()


def compile_sources() -> None:
    """.pyc files for the checkout's sources, as a wheel install has them: where PYTHONDONTWRITEBYTECODE is set
    (this project's sandboxes set it) nothing else writes them, and every nsqd the suite starts would compile its
    modules again (~40 ms a start, measured with bench/bench_startup.py's one_start)."""
    root = Path(__file__).resolve().parent.parent
    for package in ("nsqd_py", "apps"):
        compileall.compile_dir(root / package, quiet=1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)


@pytest.fixture
def nsqd_factory(tmp_path: Path) -> Iterator[Callable[..., NsqdProcess]]:
    """Start nsqd processes with extra flags; all are stopped (SIGTERM, then SIGKILL) afterwards."""
    started: list[NsqdProcess] = []

    def start(*extra: str, data_path: Path | None = None, http: bool = True) -> NsqdProcess:
        proc = NsqdProcess(data_path or tmp_path / f"data{len(started)}", *extra, http=http)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="module")
def shared_nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsqdProcess]:
    """One nsqd for a whole test module; tests use distinct topic names."""
    proc = NsqdProcess(tmp_path_factory.mktemp("nsqd"), "--max-req-timeout=10m").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def inproc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNsqd]:
    """One nsqd inside the test process for a whole module (tests/inprocess.py); tests use distinct topics."""
    server = InProcessNsqd(tmp_path_factory.mktemp("inproc"), max_req_timeout=10 * MINUTE)
    yield server
    server.close()


@pytest.fixture
def inproc_factory(tmp_path: Path) -> Iterator[Callable[..., InProcessNsqd]]:
    """In-process nsqds with their own Options (``max_rdy_count=10``, ...); all are closed afterwards."""
    started: list[InProcessNsqd] = []

    def start(**options: object) -> InProcessNsqd:
        server = InProcessNsqd(tmp_path / f"inproc{len(started)}", **options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def io() -> Iterator[IOLoopThread]:
    """A tornado IOLoop in a thread for pynsq Readers/Writers (stopped after the test)."""
    loop = IOLoopThread()
    yield loop
    loop.stop()


@pytest.fixture
def cleanup() -> Iterator[ExitStack]:
    """Register ``close`` callbacks of clients; they run (in reverse) even when the test fails."""
    with ExitStack() as stack:
        yield stack


@pytest.fixture
def name() -> Callable[[str], str]:
    """Unique topic/channel names so tests can share one nsqd."""
    return unique
