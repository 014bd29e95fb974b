"""Fixtures for cluster tests: real nsqlookupd processes (nsqd ones come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.util import LookupdProcess
from tests.support import NsqdProcess

LookupdFactory = Callable[..., LookupdProcess]


@pytest.fixture
def lookupd_factory(tmp_path: Path) -> Iterator[LookupdFactory]:
    """Start nsqlookupd processes with extra flags (``start=False`` only prepares one); all are stopped after."""
    made: list[LookupdProcess] = []

    def make(*extra: str, start: bool = True, tcp_port: int | None = None) -> LookupdProcess:
        proc = LookupdProcess(tmp_path, *extra, tcp_port=tcp_port)
        made.append(proc)
        return proc.start() if start else proc

    yield make
    for proc in made:
        proc.stop()


@pytest.fixture
def lookupd(lookupd_factory: LookupdFactory) -> LookupdProcess:
    return lookupd_factory()


@pytest.fixture
def cluster_nsqd(nsqd_factory: Callable[..., NsqdProcess]) -> Callable[..., NsqdProcess]:
    """An nsqd that registers with the given lookupds and broadcasts 127.0.0.1."""

    def start(*lookupds: LookupdProcess, extra: tuple[str, ...] = ()) -> NsqdProcess:
        flags = [f"--lookupd-tcp-address={lk.tcp_address}" for lk in lookupds]
        return nsqd_factory("--broadcast-address=127.0.0.1", *flags, *extra)

    return start
