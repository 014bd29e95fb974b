"""pytest fixtures with a real nsqd-py: installed as the plugin `nsqd_py` (entry point `pytest11`).

    def test_roundtrip(nsqd):
        nsqd.publish("events", b"hello")
        assert nsqd.consume("events", "test", 1) == [b"hello"]

`nsqd` is a fresh `nsqd_py.testing.NsqdServer` per test (addresses: `nsqd.tcp_address`, `nsqd.http_address`),
registered with the session's `nsqlookupd` when a test asks for both. The fast mode shares one server:

    def test_fast(nsqd_session, nsqd_topic):
        nsqd_session.publish(nsqd_topic, b"hello")
        assert nsqd_session.consume(nsqd_topic, "test", 1) == [b"hello"]

`nsqd_session` is one nsqd for the whole session and `nsqd_topic` a topic name of this test's own, deleted
(with its channels and messages) afterwards. Nothing is imported or started until a test uses a fixture.
"""

from __future__ import annotations

import uuid
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


@pytest.fixture(scope="session")
def nsqd_session() -> Iterator[NsqdServer]:
    """One nsqd for the test session: with `nsqd_topic`, tests stay apart without paying a start each."""
    from .testing import NsqdServer

    with NsqdServer() as server:
        yield server


@pytest.fixture
def nsqd_topic(nsqd_session: NsqdServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A topic name no other test uses (it starts with the test's name), deleted from `nsqd_session` after."""
    prefix = "".join(c if c.isalnum() or c in "_-" else "_" for c in request.node.name)[:40]
    topic = f"{prefix}-{uuid.uuid4().hex[:16]}"
    yield topic
    nsqd_session.delete_topic(topic)
