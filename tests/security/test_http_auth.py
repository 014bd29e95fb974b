"""Auth on the HTTP API (beyond nsqd, issue 46 item 5) against the real nsqd and a real auth server: the
permission table row by row, the 400/401/403/503 answers, the ttl cache, /stats filtered, /ping and /info open,
the flag off changing nothing, the FATAL without --auth-http-address, the secret in no log, and nsqadmin and
nsq_stat sending a secret."""

from __future__ import annotations

import http.client
import os
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nsqd_py.http_api.http_auth import RULES
from tests.admin.conftest import NSQADMIN
from tests.admin.scenario import admin
from tests.admin.scenario import request as admin_request
from tests.inprocess import InProcessNsqd
from tests.security.util import AuthServer, dead_port, grant, requests_for
from tests.support import NSQD_BIN, NsqdProcess, Reply
from tests.tools.support import run_tool

pytestmark = pytest.mark.process

#: secrets long and odd enough that finding one in a log cannot be chance
PUB, SUB, BOTH, ROOT, NOTHING = "pub-s3cr3t-7f1a", "sub-s3cr3t-52c9", "both-s3cr3t-0d4e", "root-s3cr3t-9b8b", \
    "none-s3cr3t-3e6f"
REFUSED, GARBAGE, SHORT_TTL = "refused-s3cr3t-a1", "garbage-s3cr3t-b2", "ttl-s3cr3t-c3"
ROOT_OF_ALL = "all-s3cr3t-d4"  # every topic, to make what the others must not see
SECRETS = (PUB, SUB, BOTH, ROOT, NOTHING, REFUSED, GARBAGE, SHORT_TTL, ROOT_OF_ALL)
REPLIES: dict[str, tuple] = {
    PUB: (200, grant(topic="^t_", permissions=("publish",), identity="producer")),
    SUB: (200, grant(topic="^t_", channels=("^c$",), permissions=("subscribe",), identity="consumer")),
    BOTH: (200, grant(topic="^t_", identity="ops")),
    ROOT: (200, grant(identity="root") | {"authorizations": []}),  # the admin identity, and nothing else
    NOTHING: (200, grant(identity="nobody") | {"authorizations": []}),
    REFUSED: (403, {"message": "unknown secret"}),
    GARBAGE: (200, b"<html>not json</html>"),
    SHORT_TTL: (200, grant(topic="^t_", ttl=1, identity="brief")),
    ROOT_OF_ALL: (200, grant(identity="everything")),
}
#: what each secret is granted, by the need of a path (the spec this file holds http_auth.py to)
GRANTED = {PUB: {"publish"}, SUB: {"subscribe", "visible"}, BOTH: {"publish", "subscribe", "both", "visible"},
           ROOT: {"admin"}, NOTHING: set()}


def bearer(secret: str) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {secret}")]


@pytest.fixture(scope="module")
def authd() -> Iterator[AuthServer]:
    server = AuthServer(lambda req: REPLIES.get(req.params.get("secret", ""), (403, {"message": "unknown"})))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory, authd: AuthServer) -> Iterator[NsqdProcess]:
    proc = NsqdProcess(tmp_path_factory.mktemp("http-auth"), f"--auth-http-address={authd.address}",
                       "--http-auth-required", "--http-admin-identity=root").start()
    yield proc
    proc.stop()


def call(proc: NsqdProcess, method: str, target: str, secret: str | None = None, body: bytes | None = None) -> Reply:
    return proc.request(method, target, body if body is not None else (b"x" if method in ("POST", "PUT") else None),
                        bearer(secret) if secret else [])


def make_channel(proc: NsqdProcess, topic: str, channel: str = "c") -> None:
    for target in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel={channel}"):
        assert call(proc, "POST", target, BOTH).status == 200


# ---- the permission table ---------------------------------------------------------------------------------------

#: (method, target with {t} for a fresh topic, need); the channel is always c
TABLE = [
    ("POST", "/pub?topic={t}", "publish"),
    ("POST", "/pub?topic={t}&defer=10", "publish"),  # the Falcon route rather than the shortcut
    ("POST", "/mpub?topic={t}", "publish"),
    ("GET", "/stats?format=json", "visible"),
    ("GET", "/stats", "visible"),
    ("GET", "/topic/peek?topic={t}", "subscribe"),
    ("GET", "/channel/peek?topic={t}&channel=c", "subscribe"),
    *(("POST", f"/topic/{action}?topic={{t}}", "both")
      for action in ("create", "delete", "empty", "pause", "unpause")),
    *(("POST", f"/channel/{action}?topic={{t}}&channel=c", "both")
      for action in ("create", "delete", "empty", "pause", "unpause")),
    ("POST", "/channel/reset?topic={t}&channel=c&to=earliest", "both"),
    ("POST", "/topic/settings?topic={t}&max_channel_depth=", "both"),  # (clears the override: changes nothing)
    ("GET", "/topic/settings?topic={t}", "subscribe"),
    ("POST", "/channel/settings?topic={t}&channel=c&max_channel_depth=", "both"),
    ("GET", "/channel/settings?topic={t}&channel=c", "subscribe"),
    ("GET", "/config/log_level", "admin"),
    ("PUT", "/config/log_level", "admin"),
    ("GET", "/metrics", "admin"),
    ("GET", "/debug/pprof/", "admin"),  # not served: like any path without a row
    ("GET", "/no/such/path", "admin"),
]


@pytest.mark.parametrize("secret", list(GRANTED))
@pytest.mark.parametrize(("method", "target", "need"), TABLE, ids=[f"{m} {t}" for m, t, _ in TABLE])
def test_permission_table(gated: NsqdProcess, secret: str, method: str, target: str, need: str) -> None:
    topic = f"t_row{abs(hash((secret, method, target))) % 10**8}"
    make_channel(gated, topic)
    body = b"info" if target.startswith("/config") else None
    reply = call(gated, method, target.format(t=topic), secret, body)
    if need in GRANTED[secret]:
        assert reply.status not in (401, 403), (reply.status, reply.body)
    else:
        assert (reply.status, reply.body) == (403, b'{"message":"UNAUTHORIZED"}')


def test_every_route_has_a_row(tmp_path: Path) -> None:
    """A route without a row would need the admin identity: only /config/{opt} is meant to."""
    from nsqd_py.http_api.routes import routes_app

    nsqd = InProcessNsqd(tmp_path)
    try:
        templates = {route.template for route in routes_app(nsqd.ctx)._router._routes}  # type: ignore[attr-defined]
    finally:
        nsqd.close()
    assert templates - set(RULES) == {"/config/{opt}"}


def test_a_refused_request_does_nothing(gated: NsqdProcess) -> None:
    topic = "t_refused_pub"
    make_channel(gated, topic)
    assert call(gated, "POST", f"/pub?topic={topic}", SUB).status == 403
    assert call(gated, "POST", f"/topic/delete?topic={topic}", PUB).status == 403
    assert call(gated, "POST", f"/pub?topic={topic}", GARBAGE).status == 503
    (row,) = call(gated, "GET", f"/stats?format=json&topic={topic}", BOTH).json()["topics"]
    assert row["message_count"] == 0


def test_a_dead_letter_topic_must_be_publishable_to_the_caller(gated: NsqdProcess) -> None:
    """BOTH may publish only to ^t_: a dead-letter template (or the default, {topic}.dead, once max_attempts is set)
    that sends a topic's dead letters elsewhere would let it publish where it may not."""
    topic = "t_dlq"
    make_channel(gated, topic)
    target = f"/channel/settings?topic={topic}&channel=c"
    assert call(gated, "POST", f"{target}&max_attempts=1&dead_letter_topic=x_{{topic}}", BOTH).status == 403
    assert call(gated, "POST", f"{target}&max_attempts=1&dead_letter_topic={{topic}}.dlq", BOTH).status == 200
    assert call(gated, "POST", f"/topic/settings?topic={topic}&dead_letter_topic=x_{{topic}}", BOTH).status == 403
    assert call(gated, "POST", f"{target}&max_attempts=", BOTH).status == 200


def test_a_channel_route_must_name_its_channel(gated: NsqdProcess) -> None:
    """Subscribe on a channel is asked of the channel; a channel route without one is refused, not widened."""
    assert call(gated, "POST", "/channel/empty?topic=t_x", SUB).status == 403
    assert call(gated, "POST", "/channel/create?topic=t_x", BOTH).status == 403


# ---- the answers --------------------------------------------------------------------------------------------


def test_answers_in_nsqds_error_shape(gated: NsqdProcess) -> None:
    cases = [
        ([], 401, b'{"message":"AUTH_REQUIRED"}'),
        ([("Authorization", "Basic dXNlcjpwYXNz")], 400, b'{"message":"INVALID_AUTH_HEADER - want Bearer <secret>"}'),
        ([("Authorization", "Bearer")], 400, b'{"message":"INVALID_AUTH_HEADER - want Bearer <secret>"}'),
        (bearer(REFUSED), 401, b'{"message":"AUTH_FAILED"}'),
        (bearer(NOTHING), 403, b'{"message":"UNAUTHORIZED"}'),
        (bearer(GARBAGE), 503, b'{"message":"AUTH_UNAVAILABLE"}'),
    ]
    for headers, status, body in cases:
        for target in ("/pub?topic=t_shape", "/stats"):
            post = target.startswith("/pub")
            reply = gated.request("POST" if post else "GET", target, b"x" if post else None, headers)
            assert (reply.status, reply.body) == (status, body), (headers, target)
            assert reply.header("Content-Type") == "application/json; charset=utf-8"
            assert reply.header("X-NSQ-Content-Type") == "nsq; version=1.0"
            assert reply.header("WWW-Authenticate") == ("Bearer" if status in (400, 401) else None)
    assert gated.request("GET", "/stats", headers=[("Authorization", "bearer " + BOTH)]).status == 200


def test_auth_server_down_is_503_and_lets_nothing_through(nsqd_factory: Callable[..., NsqdProcess]) -> None:
    proc = nsqd_factory(f"--auth-http-address=127.0.0.1:{dead_port()}", "--http-auth-required",
                        "--http-client-connect-timeout=1s", "--http-client-request-timeout=1s")
    for method, target in (("POST", "/pub?topic=t_down"), ("GET", "/stats"), ("GET", "/config/log_level")):
        reply = call(proc, method, target, BOTH)
        assert (reply.status, reply.body) == (503, b'{"message":"AUTH_UNAVAILABLE"}')
    log = proc.log()
    assert "Traceback" not in log and "failed auth against" in log
    assert BOTH not in log


def test_the_request_nsqd_sends_and_the_ttl_cache(gated: NsqdProcess, authd: AuthServer) -> None:
    """One query per secret until its ttl: TCP AUTH's request (remote IP, tls, no common name)."""
    for _ in range(3):
        assert call(gated, "POST", "/pub?topic=t_ttl", SHORT_TTL).status == 200
    (req,) = requests_for(authd, SHORT_TTL)
    assert req.params == {"common_name": "", "remote_ip": "127.0.0.1", "secret": SHORT_TTL, "tls": "false"}
    time.sleep(1.2)  # past the ttl of 1 s
    assert call(gated, "GET", "/stats", SHORT_TTL).status == 200
    assert call(gated, "GET", "/stats", SHORT_TTL).status == 200
    assert len(requests_for(authd, SHORT_TTL)) == 2
    refused_before = len(requests_for(authd, REFUSED))
    call(gated, "GET", "/stats", REFUSED)
    call(gated, "GET", "/stats", REFUSED)
    assert len(requests_for(authd, REFUSED)) == refused_before + 2  # a refusal is not kept


def test_https_asks_with_tls_true(nsqd_factory: Callable[..., NsqdProcess], auth_server: Callable,
                                  tls_flags: Callable[..., list[str]]) -> None:
    server = auth_server()
    flags = tls_flags(f"--auth-http-address={server.address}", "--http-auth-required")
    proc = nsqd_factory(*flags)
    port = int(next(f for f in flags if f.startswith("--https-address=")).rpartition(":")[2])
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ssl._create_unverified_context())
    conn.request("GET", "/stats?format=json", headers=dict(bearer("tls-secret")))
    assert conn.getresponse().status == 200
    conn.close()
    assert proc.request("GET", "/stats", headers=bearer("plain-secret")).status == 200
    assert requests_for(server, "tls-secret")[0].params["tls"] == "true"
    assert requests_for(server, "plain-secret")[0].params["tls"] == "false"


# ---- /stats shows what may be subscribed --------------------------------------------------------------------


def test_stats_lists_only_what_may_be_subscribed(gated: NsqdProcess) -> None:
    make_channel(gated, "t_seen", "c")
    make_channel(gated, "t_seen", "d")
    for target in ("/topic/create?topic=x_hidden", "/channel/create?topic=x_hidden&channel=c"):
        assert call(gated, "POST", target, ROOT_OF_ALL).status == 200
    call(gated, "POST", "/pub?topic=t_seen", PUB)
    everything = {t["topic_name"]: t for t in call(gated, "GET", "/stats?format=json", BOTH).json()["topics"]}
    assert "x_hidden" not in everything  # BOTH has ^t_ too
    seen = call(gated, "GET", "/stats?format=json", SUB).json()
    assert {t["topic_name"] for t in seen["topics"]} <= {name for name in everything}
    (row,) = [t for t in seen["topics"] if t["topic_name"] == "t_seen"]
    assert [c["channel_name"] for c in row["channels"]] == ["c"]
    full = everything["t_seen"]
    assert list(row) == list(full) and list(row["channels"][0]) == list(full["channels"][0])
    assert row["message_count"] == full["message_count"] == 1
    every_name = {t["topic_name"] for t in call(gated, "GET", "/stats?format=json", ROOT_OF_ALL).json()["topics"]}
    assert "x_hidden" in every_name
    text = call(gated, "GET", "/stats", SUB).body.decode()
    assert "[t_seen" in text and "[c " in text
    assert "[d " not in text and "x_hidden" not in text
    assert call(gated, "GET", "/stats?format=json&topic=x_hidden", SUB).json()["topics"] == []


# ---- what stays open, and the flag off ----------------------------------------------------------------------


def test_ping_and_info_stay_open(gated: NsqdProcess) -> None:
    ping = call(gated, "GET", "/ping")
    assert (ping.status, ping.body) == (200, b"OK")
    assert call(gated, "GET", "/info").json()["version"] == "1.3.0"
    assert call(gated, "GET", "/ping", REFUSED).status == 200  # not even asked


def test_flag_off_changes_nothing(nsqd_factory: Callable[..., NsqdProcess], auth_server: Callable) -> None:
    """With --auth-http-address alone (TCP AUTH) HTTP needs no secret, and a header changes no byte."""
    server = auth_server()
    proc = nsqd_factory(f"--auth-http-address={server.address}")
    for method, target in (("POST", "/pub?topic=t_off"), ("GET", "/ping"), ("POST", "/topic/pause?topic=t_off"),
                           ("GET", "/config/log_level"), ("POST", "/mpub?topic=t_off")):
        plain = call(proc, method, target)
        with_header = call(proc, method, target, "whatever")
        assert plain.status == 200
        assert (with_header.status, with_header.body) == (plain.status, plain.body)
        assert [h for h in with_header.headers if h[0] != "Date"] == [h for h in plain.headers if h[0] != "Date"]
    assert server.requests == []


def test_fatal_without_auth_http_address(tmp_path: Path) -> None:
    done = subprocess.run([str(NSQD_BIN), "--http-auth-required", f"--data-path={tmp_path}"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "FATAL: failed to instantiate nsqd - --http-auth-required needs --auth-http-address" in done.stderr


def test_no_secret_in_nsqds_log(gated: NsqdProcess) -> None:
    """After every other test of the module has sent its secrets (refused, garbage, admin and more)."""
    for secret in SECRETS:
        call(gated, "GET", f"/stats?topic=t_{secret[:3]}", secret)
    log = gated.log()
    assert "/stats?topic=t_pub" in log
    for secret in SECRETS:
        assert secret not in log


# ---- nsqadmin and nsq_stat ----------------------------------------------------------------------------------


def test_nsqadmin_sends_its_secret(gated: NsqdProcess, tmp_path: Path) -> None:
    make_channel(gated, "t_admin")
    node = f"--nsqd-http-address=127.0.0.1:{gated.http_port}"
    without = admin(NSQADMIN, tmp_path, node, name="without")
    with_flag = admin(NSQADMIN, tmp_path, node, f"--http-auth-secret={BOTH}", name="with")
    try:
        _, answer = admin_request(without.http, "GET", "/api/topics/t_admin")
        assert "AUTH_REQUIRED" in str(answer)
        status, answer = admin_request(with_flag.http, "GET", "/api/topics/t_admin")
        assert status == 200 and answer["topic_name"] == "t_admin" and "AUTH" not in str(answer), answer
        assert admin_request(with_flag.http, "POST", "/api/topics/t_admin/c", b'{"action":"pause"}')[0] == 200
        (channel,) = call(gated, "GET", "/stats?format=json&topic=t_admin", BOTH).json()["topics"][0]["channels"]
        assert channel["paused"] is True
    finally:
        without.stop()
        with_flag.stop()
    assert with_flag.log is not None and BOTH not in with_flag.log.read_text()


def test_nsq_stat_takes_the_secret_from_the_environment(gated: NsqdProcess) -> None:
    make_channel(gated, "t_stat")
    args = ("--topic=t_stat", "--channel=c", f"--nsqd-http-address=127.0.0.1:{gated.http_port}", "--count=1",
            "--interval=100ms")
    env = {**os.environ, "NSQ_HTTP_AUTH_SECRET": SUB}
    ok = subprocess.run([str(NSQD_BIN.parent / "nsq_stat"), *args], capture_output=True, timeout=30, env=env)
    assert ok.returncode == 0 and len(ok.stdout.decode().splitlines()) == 3, ok
    refused = run_tool("nsq_stat", *args)
    assert refused.returncode != 0 and b"401" in refused.stderr
