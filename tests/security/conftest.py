"""Fixtures of the security tests: a throw-away PKI, TLS server flags, a pynsq IOLoop thread, auth servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from nsqd_py.testing import free_port
from tests.security.certs import Pki, make_pki
from tests.security.util import AuthServer


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

