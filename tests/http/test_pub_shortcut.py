"""`POST /pub?topic=NAME` is served without Falcon (http/pub_shortcut.py): its answers must be the Falcon route's,
byte for byte. The same request with `&defer=0` (nothing else changes) takes the Falcon route, so each pair is
compared whole, Date aside, over a real server's socket."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nsqd_py.http.pub_shortcut import PubShortcut
from tests.http.http_support import raw_exchange
from tests.support import FRAME_RESPONSE, NsqdProcess

_DATE = re.compile(rb"Date: [^\r]+\r\n")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> NsqdProcess:
    proc = NsqdProcess(tmp_path_factory.mktemp("shortcut"), "--max-msg-size=100").start()
    yield proc
    proc.stop()


def _answer(proc: NsqdProcess, target: str, body: bytes, extra: str = "") -> bytes:
    head = f"POST {target} HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return _DATE.sub(b"Date: -\r\n", raw_exchange(proc.http_port, head.encode() + body))


@pytest.mark.parametrize(("body", "extra", "status"), [
    (b"hello", "", b"200 OK"),
    (b"", "", b"400 Bad Request"),
    (b"x" * 101, "", b"413 Request Entity Too Large"),
    (b"hello", "Expect: 100-continue\r\n", b"200 OK"),
])
def test_shortcut_answers_as_the_falcon_route(small: NsqdProcess, body: bytes, extra: str, status: bytes) -> None:
    shortcut = _answer(small, "/pub?topic=shortcut", body, extra)
    falcon_route = _answer(small, "/pub?topic=shortcut&defer=0", body, extra)
    assert shortcut.rsplit(b"HTTP/1.1 ", 1)[1].startswith(status)  # the final answer (after a 100 Continue)
    assert shortcut == falcon_route


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
        start_response("204 No Content", [])
        return [b""]


@pytest.mark.parametrize(("method", "path", "query", "to_falcon"), [
    ("POST", "/pub", "topic=t", False),
    ("POST", "/pub", "topic=t.b_c-d#ephemeral", False),
    ("POST", "/pub", "topic=t&defer=5", True),
    ("POST", "/pub", "topic=%74", True),  # escaped: Go's ParseQuery decodes it, so Falcon's route does
    ("POST", "/pub", "topic=a+b", True),
    ("POST", "/pub", "topic=t;x", True),
    ("POST", "/pub", "topic=bad!", True),
    ("POST", "/pub", "", True),
    ("POST", "/pub/", "topic=t", True),
    ("GET", "/pub", "topic=t", True),
    ("POST", "/mpub", "topic=t", True),
])
def test_which_requests_take_the_shortcut(inproc: Any, method: str, path: str, query: str, to_falcon: bool) -> None:
    falcon_app = _Falcon()
    app = PubShortcut(inproc.nsqd, falcon_app)
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "CONTENT_LENGTH": "1",
               "wsgi.input": _OneByte()}
    statuses: list[str] = []
    app(environ, lambda status, headers: statuses.append(status))
    assert falcon_app.calls == int(to_falcon)
    assert statuses == (["204 No Content"] if to_falcon else ["200 OK"])


class _OneByte:
    def read(self, size: int = -1) -> bytes:
        return b"x"
