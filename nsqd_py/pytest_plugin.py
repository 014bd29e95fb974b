"""pytest fixtures with a real nsqd-py: installed as the plugin `nsqd_py` (entry point `pytest11`).

    def test_roundtrip(nsqd):
        nsqd.publish("events", b"hello")
        assert nsqd.consume("events", "test", 1) == [b"hello"]

`nsqd` is a fresh `nsqd_py.testing.NsqdServer` per test (addresses: `nsqd.tcp_address`, `nsqd.http_address`),
registered with the session's `nsqlookupd` when a test asks for both. Nothing is imported or started until a
test uses a fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .testing import LookupdServer, NsqdServer


@pytest.fixture(scope="session")
def nsqlookupd() -> Iterator[LookupdServer]:
    """One nsqlookupd for the test session."""
    from .testing import LookupdServer

    with LookupdServer() as server:
        yield server


@pytest.fixture
def nsqd(request: pytest.FixtureRequest) -> Iterator[NsqdServer]:
    """A fresh nsqd for this test, with an empty data directory; it joins `nsqlookupd` if the test uses it."""
    from .testing import NsqdServer

    lookupd = request.getfixturevalue("nsqlookupd") if "nsqlookupd" in request.fixturenames else None
    with NsqdServer(lookupd=lookupd) as server:
        yield server
