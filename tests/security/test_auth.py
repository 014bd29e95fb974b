"""AUTH against a real HTTP auth server run by the test (§1.2, §8): every error path, the exact request nsqd
sends (GET query / POST JSON, common_name from a client certificate), ttl expiry and re-query, failing and slow
auth servers, failover between addresses, /stats fields, and pynsq/gnsq clients with ``auth_secret``."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import replace

import pytest

from nsqd_py.cluster.auth import AuthServers
from tests.clients.util import GnsqCollector, IOLoopThread, PynsqReader, PynsqWriter, settle
from tests.inprocess import InProcessNsqd
from tests.security.certs import Pki
from tests.security.util import (
    FRAME_ERROR,
    FRAME_RESPONSE,
    AuthRequest,
    AuthServer,
    SecureConn,
    client_context,
    dead_port,
    grant,
    mpub_body,
    requests_for,
)
from tests.support import NsqdProcess, wait_until

ALICE = grant(topic="^t", channels=("^c$", "^$"), identity="alice", identity_url="https://id.example/alice")

BAD_REPLIES = {
    "status-500": (500, {"message": "boom"}),
    "status-403": (403, {"message": "nope"}),
    "status-404-html": (404, b"<html>not found</html>"),
    "not-json": (200, b"this is not json"),
    "json-list": (200, [1, 2]),
    "unknown-permission": (200, grant(permissions=("publish", "admin"))),
    "bad-topic-regex": (200, grant(topic="(")),
    "bad-channel-regex": (200, grant(channels=("[",))),
    "ttl-zero": (200, grant(ttl=0)),
    "ttl-negative": (200, grant(ttl=-5)),
    "ttl-missing": (200, {k: v for k, v in grant().items() if k != "ttl"}),
    "ttl-float": (200, grant(ttl=1.5)),  # type: ignore[arg-type]
}


class Policy:
    """The auth server's behaviour, keyed by secret; tests may replace entries while nsqd is running."""

    def __init__(self) -> None:
        self.replies: dict[str, tuple] = {
            "alice": (200, ALICE),
            "pub-only": (200, grant(topic="^pubonly$", permissions=("publish",), identity="bob", identity_url="")),
            "sub-only": (200, grant(topic=".*", channels=("^c$",), permissions=("subscribe",), identity="carol")),
            "empty": (200, grant(identity="nobody") | {"authorizations": []}),
            "null": (200, grant(identity="nobody") | {"authorizations": None}),
            "slow": ("sleep", 3.0, 200, ALICE),
            "slow-2": ("sleep", 3.0, 200, ALICE),
            "pynsq-wrong": (403, {"message": "nope"}),
            "drip": ("drip", 0.35, 200, ALICE),  # 8 x 0.35 s = 2.8 s for the whole body
            **BAD_REPLIES,
        }

    def __call__(self, req: AuthRequest) -> tuple:
        return self.replies.get(req.params.get("secret", ""), (403, {"message": "unknown secret"}))


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy()


@pytest.fixture(scope="module")
def authd(policy: Policy) -> Iterator[AuthServer]:
    server = AuthServer(policy)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def auth_nsqd(tmp_path_factory: pytest.TempPathFactory, authd: AuthServer,
              tls_flags: Callable[..., list[str]]) -> Iterator[NsqdProcess]:
    """nsqd with TLS available (optional) and the GET auth server (host:port form -> http://host:port/auth)."""
    proc = NsqdProcess(tmp_path_factory.mktemp("auth"), *tls_flags(), f"--auth-http-address={authd.address}",
                       "--http-client-connect-timeout=1s", "--http-client-request-timeout=1s").start()
    yield proc
    proc.stop()


def authed_conn(proc: NsqdProcess, secret: str, **identify: object) -> SecureConn:
    conn = SecureConn(proc.tcp_port)
    assert conn.negotiate(**identify)["auth_required"] is True
    ftype, data = conn.auth(secret)
    assert ftype == FRAME_RESPONSE, data
    return conn


# ---- the happy path and the exact request ---------------------------------------------------------------------


def test_auth_grants_and_reports_identity(auth_nsqd: NsqdProcess, authd: AuthServer) -> None:
    conn = SecureConn(auth_nsqd.tcp_port)
    reply = conn.negotiate(user_agent="sec-test/1.0")
    assert reply["auth_required"] is True
    before = len(requests_for(authd, "alice"))
    ftype, data = conn.auth("alice")
    assert ftype == FRAME_RESPONSE
    assert data == b'{"identity":"alice","identity_url":"https://id.example/alice","permission_count":1}'
    assert conn.pub("t_auth_ok", b"hello") == (FRAME_RESPONSE, b"OK")
    assert conn.mpub("t_auth_ok", [b"a", b"b"]) == (FRAME_RESPONSE, b"OK")
    conn.send("DPUB t_auth_ok 10", b"later")
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    reqs = requests_for(authd, "alice")[before:]
    assert len(reqs) == 1  # ttl 3600: PUB/MPUB/DPUB use the cached answer
    req = reqs[0]
    assert req.method == "GET" and req.path == "/auth"
    assert req.query == {"common_name": [""], "remote_ip": ["127.0.0.1"], "secret": ["alice"], "tls": ["false"]}
    assert req.headers["Accept"] == "application/vnd.nsq; version=1.0"
    (producer,) = [p for p in auth_nsqd.stats()["producers"] if p["user_agent"] == "sec-test/1.0"]
    assert producer["authed"] is True
    assert producer["auth_identity"] == "alice"
    assert producer["auth_identity_url"] == "https://id.example/alice"
    # subscribe on an allowed topic/channel too
    sub = authed_conn(auth_nsqd, "alice")
    assert sub.sub("t_auth_ok", "c") == (FRAME_RESPONSE, b"OK")
    assert sub.consume(3) == [b"hello", b"a", b"b"]


def test_auth_reply_escapes_like_go(auth_nsqd: NsqdProcess, policy: Policy) -> None:
    policy.replies["html"] = (200, grant(identity="a&b<c>", identity_url="https://id/?x=1&y=2"))
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.negotiate()
    ftype, data = conn.auth("html")
    assert ftype == FRAME_RESPONSE
    assert json.loads(data)["identity"] == "a&b<c>"  # same value either way
    assert data == (b'{"identity":"a\\u0026b\\u003cc\\u003e","identity_url":"https://id/?x=1\\u0026y=2",'
                    b'"permission_count":1}')


def test_query_string_is_encoded_like_go(auth_nsqd: NsqdProcess, authd: AuthServer, policy: Policy) -> None:
    """Go's url.Values.Encode: keys sorted, QueryEscape (space -> '+', '/', '&', '=' escaped), empty values kept."""
    secret = "s3cr/t x&y=z+ü"
    policy.replies[secret] = (200, ALICE)
    authed_conn(auth_nsqd, secret)
    (req,) = requests_for(authd, secret)
    assert req.query["secret"] == [secret]
    assert req.raw_query == "common_name=&remote_ip=127.0.0.1&secret=s3cr%2Ft+x%26y%3Dz%2B%C3%BC&tls=false"


def test_binary_secret_is_sent_byte_for_byte(auth_nsqd: NsqdProcess, authd: AuthServer) -> None:
    """nsqd passes string(body) to url.Values: the raw bytes are percent-encoded (%FF), not replaced."""
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.negotiate()
    conn.send("AUTH", b"\xff\xfe-binary")
    conn.frame()
    (req,) = [r for r in list(authd.requests) if r.raw_query.endswith("-binary&tls=false")]
    assert req.raw_query == "common_name=&remote_ip=127.0.0.1&secret=%FF%FE-binary&tls=false"


def test_tls_client_certificate_common_name_is_sent(auth_nsqd: NsqdProcess, authd: AuthServer, pki: Pki,
                                                    policy: Policy) -> None:
    """After a tls_v1 upgrade nsqd sends tls=true. Without --tls-client-auth-policy the server does not ask for a
    client certificate (Go: tls.NoClientCert), so even a client that has one sends none: common_name is ""."""
    policy.replies["tls-plain"] = policy.replies["tls-cert"] = (200, ALICE)
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.negotiate(client_context(pki.ca), snappy=True)
    assert conn.auth("tls-plain")[0] == FRAME_RESPONSE
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.negotiate(client_context(pki.ca, pki.client_cert, pki.client_key), deflate=True)
    assert conn.auth("tls-cert")[0] == FRAME_RESPONSE
    assert requests_for(authd, "tls-plain")[0].params == {"common_name": "", "remote_ip": "127.0.0.1",
                                                          "secret": "tls-plain", "tls": "true"}
    assert requests_for(authd, "tls-cert")[0].params == {"common_name": "", "remote_ip": "127.0.0.1",
                                                         "secret": "tls-cert", "tls": "true"}


def test_mutual_tls_required_common_name(nsqd_factory: Callable[..., NsqdProcess], auth_server: Callable,
                                         tls_flags: Callable[..., list[str]], pki: Pki) -> None:
    """--tls-client-auth-policy=require-verify with auth: the verified certificate's CN reaches the auth server."""
    server = auth_server()
    proc = nsqd_factory(*tls_flags("--tls-client-auth-policy=require-verify", f"--tls-root-ca-file={pki.ca}"),
                        f"--auth-http-address={server.address}")
    conn = SecureConn(proc.tcp_port)
    conn.negotiate(client_context(pki.ca, pki.client_cert, pki.client_key))
    assert conn.auth("x")[0] == FRAME_RESPONSE
    assert conn.pub("t", b"x") == (FRAME_RESPONSE, b"OK")
    assert server.requests[0].params["common_name"] == pki.client_cn
    assert server.requests[0].params["tls"] == "true"


# ---- every error path ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "body", "cmd"), [
    ("PUB t", b"x", "PUB"),
    ("MPUB t", mpub_body([b"x"]), "MPUB"),
    ("DPUB t 0", b"x", "DPUB"),
    ("SUB t c", None, "SUB"),
])
def test_commands_before_auth(line: str, body: bytes | None, cmd: str, auth_nsqd: NsqdProcess) -> None:
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.negotiate()
    conn.send(line, body)
    assert conn.error_then_closed() == f"E_AUTH_FIRST AUTH required before {cmd}".encode()


def test_commands_before_auth_without_identify(auth_nsqd: NsqdProcess) -> None:
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.send("PUB t", b"x")
    assert conn.error_then_closed() == b"E_AUTH_FIRST AUTH required before PUB"


def test_nop_and_identify_need_no_auth(auth_nsqd: NsqdProcess) -> None:
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.send("NOP")
    conn.negotiate()
    assert authed_conn(auth_nsqd, "alice").pub("t", b"x") == (FRAME_RESPONSE, b"OK")
    conn.send("NOP")
    assert not conn.is_closed(0.2)


@pytest.mark.parametrize("secret", [*list(BAD_REPLIES), "slow", "no-such-secret"])
def test_auth_server_failures(secret: str, auth_nsqd: NsqdProcess, authd: AuthServer) -> None:
    """Non-200, unparsable or invalid answers, and an answer slower than --http-client-request-timeout=1s:
    all are `E_AUTH_FAILED AUTH failed` (details only logged)."""
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.negotiate()
    started = time.monotonic()
    conn.send("AUTH", secret.encode())
    assert conn.error_then_closed() == b"E_AUTH_FAILED AUTH failed"
    elapsed = time.monotonic() - started
    if secret == "slow":
        assert 0.9 < elapsed < 2.5, elapsed
    assert len(requests_for(authd, secret)) == 1


def test_request_timeout_covers_the_whole_response(auth_nsqd: NsqdProcess) -> None:
    """An auth server that sends its headers at once and then drips the body over ~2.8 s: with
    --http-client-request-timeout=1s nsqd gives up after ~1 s (E_AUTH_FAILED)."""
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.negotiate()
    started = time.monotonic()
    conn.send("AUTH", b"drip")
    ftype, data = conn.frame()
    elapsed = time.monotonic() - started
    assert (ftype, data) == (FRAME_ERROR, b"E_AUTH_FAILED AUTH failed")
    assert elapsed < 2.5, elapsed  # the drip would take 2.8 s


@pytest.mark.parametrize("secret", ["empty", "null"])
def test_no_authorizations(secret: str, auth_nsqd: NsqdProcess) -> None:
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.negotiate()
    conn.send("AUTH", secret.encode())
    assert conn.error_then_closed() == b"E_UNAUTHORIZED AUTH no authorizations found"


@pytest.mark.parametrize(("secret", "line", "body", "error"), [
    ("alice", "PUB other", b"x", b'E_UNAUTHORIZED AUTH failed for PUB on "other" ""'),
    ("alice", "MPUB other", mpub_body([b"x"]), b'E_UNAUTHORIZED AUTH failed for MPUB on "other" ""'),
    ("alice", "DPUB other 5", b"x", b'E_UNAUTHORIZED AUTH failed for DPUB on "other" ""'),
    ("alice", "SUB t x", None, b'E_UNAUTHORIZED AUTH failed for SUB on "t" "x"'),
    ("alice", "SUB other c", None, b'E_UNAUTHORIZED AUTH failed for SUB on "other" "c"'),
    ("pub-only", "SUB pubonly c", None, b'E_UNAUTHORIZED AUTH failed for SUB on "pubonly" "c"'),
    ("pub-only", "PUB pubonly2", b"x", b'E_UNAUTHORIZED AUTH failed for PUB on "pubonly2" ""'),
    ("sub-only", "PUB t", b"x", b'E_UNAUTHORIZED AUTH failed for PUB on "t" ""'),  # and "^c$" does not match ""
])
def test_not_allowed(secret: str, line: str, body: bytes | None, error: bytes, auth_nsqd: NsqdProcess) -> None:
    conn = authed_conn(auth_nsqd, secret)
    conn.send(line, body)
    assert conn.error_then_closed() == error


def test_allowed_variants(auth_nsqd: NsqdProcess) -> None:
    """Unanchored topic regexes match anywhere; publish needs a channel regex that matches "" (alice has ^$)."""
    assert authed_conn(auth_nsqd, "alice").pub("t-anything", b"x") == (FRAME_RESPONSE, b"OK")
    assert authed_conn(auth_nsqd, "pub-only").pub("pubonly", b"x") == (FRAME_RESPONSE, b"OK")
    assert authed_conn(auth_nsqd, "sub-only").sub("anything", "c") == (FRAME_RESPONSE, b"OK")


def test_auth_twice(auth_nsqd: NsqdProcess) -> None:
    conn = authed_conn(auth_nsqd, "alice")
    conn.send("AUTH", b"alice")
    assert conn.error_then_closed() == b"E_INVALID AUTH already set"


def test_auth_protocol_errors(auth_nsqd: NsqdProcess) -> None:
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.send("AUTH extra", b"alice")
    assert conn.error_then_closed() == b"E_INVALID AUTH invalid number of parameters"
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.send_raw(b"AUTH\n" + (0).to_bytes(4, "big"))
    assert conn.error_then_closed() == b"E_BAD_BODY AUTH invalid body size 0"
    conn = SecureConn(auth_nsqd.tcp_port)
    conn.send_raw(b"AUTH\n" + (5242881).to_bytes(4, "big"))
    assert conn.error_then_closed() == b"E_BAD_BODY AUTH body too big 5242881 > 5242880"
    # AUTH after SUB is impossible with auth on; AUTH is only valid in the init state
    conn = authed_conn(auth_nsqd, "alice")
    assert conn.sub("t_state", "c") == (FRAME_RESPONSE, b"OK")
    conn.send("AUTH", b"alice")
    assert conn.error_then_closed() == b"E_INVALID cannot AUTH in current state"


def test_auth_disabled(nsqd_factory: Callable[..., NsqdProcess]) -> None:
    proc = nsqd_factory()
    conn = SecureConn(proc.tcp_port)
    assert conn.negotiate()["auth_required"] is False
    conn.send("AUTH", b"alice")
    assert conn.error_then_closed() == b"E_AUTH_DISABLED AUTH disabled"


# ---- ttl expiry and re-query --------------------------------------------------------------------------------------


class FakeClock:
    """The monotonic clock nsqd's auth answers expire by, moved on by the test instead of sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clocked(inproc_factory: Callable[..., InProcessNsqd], authd: AuthServer) -> tuple[InProcessNsqd, FakeClock]:
    """An in-process nsqd asking ``authd``, whose answers expire by a FakeClock."""
    server = inproc_factory(auth_http_addresses=[authd.address])
    clock = FakeClock()
    servers = AuthServers.from_options(server.nsqd.opts, server.nsqd.logger)
    assert servers is not None
    server.ctx.auth_servers = replace(servers, clock=clock)
    return server, clock


def clocked_conn(server: InProcessNsqd, secret: str, **identify: object) -> SecureConn:
    conn = server.connect(conn_class=SecureConn)
    assert conn.negotiate(**identify)["auth_required"] is True
    ftype, data = conn.auth(secret)
    assert ftype == FRAME_RESPONSE, data
    return conn


def test_ttl_expiry_requeries(clocked: tuple[InProcessNsqd, FakeClock], authd: AuthServer, policy: Policy) -> None:
    """ttl 2: within two seconds the cached answer is used; afterwards every check past the ttl asks again, and
    what the new answer says is applied (identity changes, authorizations shrink, server errors)."""
    server, clock = clocked
    secret = "expiring"
    policy.replies[secret] = (200, grant(ttl=2, identity="v1", identity_url="https://id/v1"))
    conn = clocked_conn(server, secret, user_agent="expiring/1")
    for _ in range(3):
        clock.advance(0.5)
        assert conn.pub("t_exp", b"x") == (FRAME_RESPONSE, b"OK")
    assert len(requests_for(authd, secret)) == 1
    clock.advance(0.6)  # 2.1 s after the answer
    policy.replies[secret] = (200, grant(ttl=2, identity="v2", identity_url="https://id/v2"))
    assert conn.pub("t_exp", b"x") == (FRAME_RESPONSE, b"OK")
    assert conn.pub("t_exp", b"x") == (FRAME_RESPONSE, b"OK")
    assert len(requests_for(authd, secret)) == 2
    # now the server takes the topic away: the next check past the ttl refuses
    clock.advance(2.3)
    policy.replies[secret] = (200, grant(topic="^elsewhere$", ttl=2))
    conn.send("PUB t_exp", b"x")
    assert conn.error_then_closed() == b'E_UNAUTHORIZED AUTH failed for PUB on "t_exp" ""'
    assert len(requests_for(authd, secret)) == 3
    # and a server error on re-query is E_AUTH_FAILED
    policy.replies[secret] = (200, grant(ttl=2))
    conn = clocked_conn(server, secret)
    clock.advance(2.3)
    policy.replies[secret] = (500, {"message": "down"})
    conn.send("SUB t_exp c")
    assert conn.error_then_closed() == b"E_AUTH_FAILED AUTH failed"
    # an expired, re-queried empty answer: E_UNAUTHORIZED (not allowed)
    policy.replies[secret] = (200, grant(ttl=2))
    conn = clocked_conn(server, secret)
    clock.advance(2.3)
    policy.replies[secret] = (200, grant(ttl=2) | {"authorizations": []})
    conn.send("PUB t_exp", b"x")
    assert conn.error_then_closed() == b'E_UNAUTHORIZED AUTH failed for PUB on "t_exp" ""'


def test_stats_identity_follows_requery(clocked: tuple[InProcessNsqd, FakeClock], policy: Policy) -> None:
    server, clock = clocked
    secret = "reidentify"
    policy.replies[secret] = (200, grant(ttl=2, identity="v1", identity_url="https://id/v1"))
    conn = clocked_conn(server, secret, user_agent="reidentify/1")
    assert conn.pub("t_reid", b"x") == (FRAME_RESPONSE, b"OK")
    clock.advance(2.3)
    policy.replies[secret] = (200, grant(ttl=2, identity="v2", identity_url="https://id/v2"))
    assert conn.pub("t_reid", b"x") == (FRAME_RESPONSE, b"OK")
    (row,) = [p for p in server.stats()["producers"] if p["user_agent"] == "reidentify/1"]
    assert (row["auth_identity"], row["auth_identity_url"]) == ("v2", "https://id/v2")


def test_slow_auth_server_does_not_block_others(auth_nsqd: NsqdProcess, authd: AuthServer) -> None:
    """While one client's AUTH waits on a slow auth server, other connections are served normally."""
    slow = SecureConn(auth_nsqd.tcp_port)
    slow.negotiate()
    slow.send("AUTH", b"slow-2")
    started = time.monotonic()
    fast = authed_conn(auth_nsqd, "alice")
    for _ in range(5):
        assert fast.pub("t_fast", b"x") == (FRAME_RESPONSE, b"OK")
    assert time.monotonic() - started < 0.9  # the slow AUTH holds its connection for 1 s
    assert auth_nsqd.stats(topic="t_fast")["topics"][0]["message_count"] >= 5
    assert slow.error_then_closed() == b"E_AUTH_FAILED AUTH failed"


# ---- POST, URLs, several auth servers ----------------------------------------------------------------------------


def test_post_method_and_full_url(nsqd_factory: Callable[..., NsqdProcess], auth_server: Callable) -> None:
    """--auth-http-request-method=post: JSON body of the same parameters with list values; a value containing
    :// is used as the URL as is (own path and query kept)."""
    server = auth_server()
    proc = nsqd_factory(f"--auth-http-address=http://127.0.0.1:{server.port}/v2/check?realm=nsq",
                        "--auth-http-request-method=post")
    conn = authed_conn(proc, "alice")
    assert conn.pub("t", b"x") == (FRAME_RESPONSE, b"OK")
    (req,) = server.requests
    assert req.method == "POST"
    assert req.path == "/v2/check" and req.query == {"realm": ["nsq"]}
    assert req.body == {"common_name": [""], "remote_ip": ["127.0.0.1"], "secret": ["alice"], "tls": ["false"]}
    assert req.headers["Content-Type"] == "application/json"
    assert req.headers["Accept"] == "application/vnd.nsq; version=1.0"


def test_first_auth_server_down_uses_the_next(nsqd_factory: Callable[..., NsqdProcess],
                                             auth_server: Callable) -> None:
    """Two --auth-http-address values, one refusing connections: every AUTH still succeeds (nsqd starts at a
    random address and moves on after a failure)."""
    server = auth_server()
    proc = nsqd_factory(f"--auth-http-address=127.0.0.1:{dead_port()}", f"--auth-http-address={server.address}",
                        "--http-client-connect-timeout=1s")
    for i in range(8):
        conn = authed_conn(proc, f"s{i}")
        assert conn.pub("t", b"x") == (FRAME_RESPONSE, b"OK")
        conn.close()
    assert len(server.requests) == 8
    # and a failing (500) first server is skipped the same way
    failing = auth_server(lambda req: (500, {"message": "down"}))
    proc = nsqd_factory(f"--auth-http-address={failing.address}", f"--auth-http-address={server.address}")
    for i in range(6):
        authed_conn(proc, f"f{i}").close()
    assert len(server.requests) == 14


def test_all_auth_servers_down(nsqd_factory: Callable[..., NsqdProcess]) -> None:
    proc = nsqd_factory(f"--auth-http-address=127.0.0.1:{dead_port()}",
                        f"--auth-http-address=127.0.0.1:{dead_port()}")
    conn = SecureConn(proc.tcp_port)
    conn.send("AUTH", b"x")
    assert conn.error_then_closed() == b"E_AUTH_FAILED AUTH failed"


# ---- client libraries -----------------------------------------------------------------------------------------------


def test_pynsq_with_auth_secret_and_tls(auth_nsqd: NsqdProcess, authd: AuthServer, pki: Pki, io: IOLoopThread,
                                        cleanup: ExitStack) -> None:
    """pynsq Writer and Reader (TLS + snappy) authenticate with ``auth_secret``; the auth server sees tls=true;
    N published = N consumed."""
    tls = {"tls_v1": True, "tls_options": {"ca_certs": str(pki.ca), "cert_reqs": ssl.CERT_REQUIRED,
                                           "ssl_version": ssl.PROTOCOL_TLS_CLIENT}}
    before = len(requests_for(authd, "alice"))
    reader = PynsqReader(io, auth_nsqd.tcp_address, "t_pynsq_auth", "c", max_in_flight=20, auth_secret="alice",
                         snappy=True, user_agent="pynsq-auth-reader", **tls)
    cleanup.callback(reader.close)
    writer = cleanup.enter_context(closing(PynsqWriter(io, auth_nsqd.tcp_address, auth_secret="alice", **tls)))
    sent = [f"m{i}".encode() * (i + 1) for i in range(60)]
    assert writer.mpub("t_pynsq_auth", sent[:30]) == b"OK"
    for body in sent[30:]:
        assert writer.pub("t_pynsq_auth", body) == b"OK"
    wait_until(lambda: len(reader.received) >= len(sent), what="all messages")
    assert settle(lambda: len(reader.received), quiet=0.3) == len(sent)
    assert sorted(reader.bodies) == sorted(sent)
    reqs = requests_for(authd, "alice")[before:]
    assert len(reqs) == 2
    assert [r.params for r in reqs] == [{"common_name": "", "remote_ip": "127.0.0.1", "secret": "alice",
                                         "tls": "true"}] * 2
    stats = auth_nsqd.stats(topic="t_pynsq_auth")
    (client,) = stats["topics"][0]["channels"][0]["clients"]
    assert client["authed"] is True and client["auth_identity"] == "alice" and client["tls"] is True
    assert client["snappy"] is True


def test_pynsq_with_wrong_secret_gets_error(auth_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack) -> None:
    errors: list[str] = []

    def make() -> object:
        import nsq

        writer = nsq.Writer([auth_nsqd.tcp_address], auth_secret="pynsq-wrong")
        original = writer._on_connection_error

        def record(conn: object, error: object, **kw: object) -> None:
            errors.append(str(error))
            original(conn, error, **kw)

        writer._on_connection_error = record
        return writer

    writer = io.call(make)
    cleanup.callback(lambda: io.call(lambda: [c.close() for c in list(writer.conns.values())]))
    wait_until(lambda: errors, what="an AUTH error")
    assert "E_AUTH_FAILED" in errors[0]


def test_gnsq_consumer_with_auth_secret(auth_nsqd: NsqdProcess, cleanup: ExitStack) -> None:
    consumer = GnsqCollector(auth_nsqd.tcp_address, "t_gnsq_auth", "c", max_in_flight=10, auth_secret=b"alice",
                             deflate=True)
    cleanup.callback(consumer.close)
    conn = authed_conn(auth_nsqd, "alice")
    sent = [f"g{i}".encode() for i in range(40)]
    assert conn.mpub("t_gnsq_auth", sent) == (FRAME_RESPONSE, b"OK")
    wait_until(lambda: len(consumer.received) >= len(sent), what="all messages")
    assert sorted(consumer.bodies) == sorted(sent)


def test_concurrent_auths(auth_nsqd: NsqdProcess, authd: AuthServer) -> None:
    """Many clients authenticating at once (each AUTH is an HTTP request made from the server's event loop)."""
    results: list[tuple[int, bytes]] = []

    def one() -> None:
        conn = SecureConn(auth_nsqd.tcp_port, timeout=10)
        conn.negotiate()
        results.append(conn.auth("alice"))
        results.append(conn.pub("t_conc", b"x"))
        conn.close()

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert len(results) == 40
    assert all(ftype == FRAME_RESPONSE for ftype, _ in results), [r for r in results if r[0] == FRAME_ERROR]
    assert json.loads(results[0][1])["identity"] == "alice"
