"""Fixtures that start the real nsqd process (installed console script) on free ports."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clients.util import IOLoopThread
from tests.support import NsqdProcess


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
    return lambda prefix: f"{prefix}_{uuid.uuid4().hex[:10]}"
