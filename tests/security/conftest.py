"""Fixtures of the security tests: a throw-away PKI, TLS server flags, a pynsq IOLoop thread, auth servers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from tests.clients.util import IOLoopThread
from tests.security.certs import Pki, make_pki
from tests.security.util import AuthServer
from tests.support import free_port


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def tls_flags(pki: Pki) -> Callable[..., list[str]]:
    """``--tls-cert/--tls-key`` plus a private ``--https-address`` (nsqd's default 0.0.0.0:4152 would collide
    between parallel servers) and any extra flags."""

    def flags(*extra: str) -> list[str]:
        return [f"--tls-cert={pki.server_cert}", f"--tls-key={pki.server_key}",
                f"--https-address=127.0.0.1:{free_port()}", *extra]

    return flags


@pytest.fixture
def io() -> Iterator[IOLoopThread]:
    loop = IOLoopThread()
    yield loop
    loop.stop()


@pytest.fixture
def cleanup() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


@pytest.fixture
def name() -> Callable[[str], str]:
    return lambda prefix: f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def auth_server() -> Iterator[Callable[..., AuthServer]]:
    """Start auth servers (``AuthServer(responder)``); all are stopped after the test."""
    servers: list[AuthServer] = []

    def start(responder: Callable | None = None) -> AuthServer:
        server = AuthServer(responder) if responder else AuthServer()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()

