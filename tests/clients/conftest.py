"""Fixtures for the third-party client tests: a pynsq IOLoop thread, unique names, and guaranteed cleanup."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from tests.clients.util import IOLoopThread


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

    def make(prefix: str) -> str:
        return f"{prefix}_{uuid.uuid4().hex[:10]}"

    return make
