"""Fixtures that start the real nsqd process (installed console script) on free ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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
