"""`POST /pub?topic=NAME` and `GET /ping` are served without Falcon (http_api/shortcuts.py): their answers and
access log lines must be the Falcon routes', byte for byte. The same request with `&defer=0` (a ping with a query) takes
the Falcon route, so each pair is compared whole, Date aside, over a real server's socket. The Falcon app is only
built for the first request that needs it."""

from __future__ import annotations

import re
from typing import Any

import falcon.testing
import pytest

from nsqd_py.http_api.shortcuts import Shortcuts
from tests.http.http_support import raw_exchange
from tests.support import FRAME_RESPONSE, NsqdProcess

_DATE = re.compile(rb"Date: [^\r]+\r\n")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> NsqdProcess:
    proc = NsqdProcess(tmp_path_factory.mktemp("shortcut"), "--max-msg-size=100").start()
    yield proc
    proc.stop()


def _answer(proc: NsqdProcess, target: str, body: bytes, extra: str = "", method: str = "POST") -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return _DATE.sub(b"Date: -\r\n", raw_exchange(proc.http_port, head.encode() + body))


@pytest.mark.parametrize(("topic", "body", "extra", "status"), [
    ("shortcut", b"hello", "", b"200 OK"),
    ("shortcut", b"", "", b"400 Bad Request"),
    ("shortcut", b"x" * 101, "", b"413 Request Entity Too Large"),
    ("shortcut", b"hello", "Expect: 100-continue\r\n", b"200 OK"),
    ("bad!", b"hello", "", b"400 Bad Request"),  # INVALID_TOPIC, from pub's plain path and from its parsed one
    ("", b"hello", "", b"400 Bad Request"),
])
def test_shortcut_answers_as_the_falcon_route(small: NsqdProcess, topic: str, body: bytes, extra: str,
                                              status: bytes) -> None:
    shortcut = _answer(small, f"/pub?topic={topic}", body, extra)
    falcon_route = _answer(small, f"/pub?topic={topic}&defer=0", body, extra)
    assert shortcut.rsplit(b"HTTP/1.1 ", 1)[1].startswith(status)  # the final answer (after a 100 Continue)
    assert shortcut == falcon_route


def test_ping_answers_and_logs_as_the_falcon_route(small: NsqdProcess) -> None:
    shortcut = _answer(small, "/ping", b"", method="GET")
    falcon_route = _answer(small, "/ping?from=falcon", b"", method="GET")
    assert shortcut.startswith(b"HTTP/1.1 200 OK\r\n") and shortcut.endswith(b"\r\n\r\nOK")
    assert shortcut == falcon_route
    lines = re.findall(r"INFO: 200 GET (/ping\S*) \(127\.0\.0\.1:\d+\) [\d.]+[µm]?s\n", small.log())
    assert lines[-2:] == ["/ping", "/ping?from=falcon"]


def test_unhealthy_ping_answers_as_the_falcon_route(inproc: Any) -> None:
    """nsqd's 500 `NOK - <error>` after a failed disk write, from both routes."""
    inproc.nsqd.set_health(OSError("disk full"))
    try:
        shortcut, falcon_route = (_call(inproc.app, query) for query in ("", "from=falcon"))
    finally:
        inproc.nsqd.set_health(None)
    assert shortcut == falcon_route
    assert shortcut == ("500 Internal Server Error", {"content-type": "text/plain; charset=utf-8"}, b"NOK - disk full")
    assert inproc.log().count("INFO: 500 GET /ping") == 2


def _call(app: Any, query: str) -> tuple[str, dict[str, str], bytes]:
    """A `GET /ping` through the WSGI app: status, headers (case and Content-Length, which the server adds, aside),
    body."""
    started: list[tuple[str, list[tuple[str, str]]]] = []
    body = b"".join(app(falcon.testing.create_environ(path="/ping", query_string=query),
                        lambda status, headers, *_: started.append((status, headers))))
    (status, headers), = started
    return status, {k.lower(): v for k, v in headers if k.lower() != "content-length"}, body


def test_falcon_app_is_built_at_the_first_request_that_needs_it(inproc: Any) -> None:
    built: list[_Falcon] = []

    def make_app() -> _Falcon:
        built.append(_Falcon())
        return built[-1]

    app = Shortcuts(inproc.nsqd, make_app)
    for method, path, query in (("GET", "/ping", ""), ("POST", "/pub", "topic=t")):
        app(_environ(method, path, query), lambda status, headers: None)
    assert built == []
    for _ in range(2):
        app(_environ("GET", "/stats", ""), lambda status, headers: None)
    assert len(built) == 1 and built[0].calls == 2


def test_shortcut_publishes_in_order(small: NsqdProcess) -> None:
    conn = small.connect()
    conn.identify()
    assert conn.sub("shortcut_order", "c") == (FRAME_RESPONSE, b"OK")
    conn.send("RDY 10")
    for i in range(5):
        assert small.request("POST", "/pub?topic=shortcut_order", f"m{i}".encode()).status == 200
    assert [conn.message().body for _ in range(5)] == [f"m{i}".encode() for i in range(5)]


class _Falcon:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        self.calls += 1
        start_response(_TO_FALCON, [])
        return [b""]


_TO_FALCON = "204 No Content"


@pytest.mark.parametrize(("method", "path", "query", "status"), [
    ("POST", "/pub", "topic=t", "200 OK"),
    ("POST", "/pub", "topic=t.b_c-d#ephemeral", "200 OK"),
    ("POST", "/pub", "topic=bad!", "400 Bad Request"),  # plain, so pub's own check refuses the name
    ("POST", "/pub", "topic=", "400 Bad Request"),
    ("POST", "/pub", "topic=t&defer=5", _TO_FALCON),
    ("POST", "/pub", "topic=%74", _TO_FALCON),  # escaped: Go's ParseQuery decodes it, so Falcon's route does
    ("POST", "/pub", "topic=a+b", _TO_FALCON),
    ("POST", "/pub", "topic=t;x", _TO_FALCON),
    ("POST", "/pub", "", _TO_FALCON),
    ("POST", "/pub/", "topic=t", _TO_FALCON),
    ("GET", "/pub", "topic=t", _TO_FALCON),
    ("POST", "/mpub", "topic=t", _TO_FALCON),
    ("GET", "/ping", "", "200 OK"),
    ("GET", "/ping", "x=1", _TO_FALCON),
    ("HEAD", "/ping", "", _TO_FALCON),
    ("POST", "/ping", "", _TO_FALCON),
    ("GET", "/ping/", "", _TO_FALCON),
])
def test_which_requests_take_the_shortcut(inproc: Any, method: str, path: str, query: str, status: str) -> None:
    falcon_app = _Falcon()
    app = Shortcuts(inproc.nsqd, lambda: falcon_app)
    statuses: list[str] = []
    app(_environ(method, path, query), lambda status, headers: statuses.append(status))
    assert falcon_app.calls == int(status == _TO_FALCON)
    assert statuses == [status]


class _OneByte:
    def read(self, size: int = -1) -> bytes:
        return b"x"


def _environ(method: str, path: str, query: str) -> dict[str, Any]:
    return {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "CONTENT_LENGTH": "1",
            "wsgi.input": _OneByte(), "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "1"}
