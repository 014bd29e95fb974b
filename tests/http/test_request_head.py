"""Request heads Go's net/http refuses, refused the same way: each row's bytes were sent to Go nsqd 1.3.0 and its
answer recorded (Date left out). The rows double as the regression corpus of the HTTP fuzz tests."""

from __future__ import annotations

import socket
import time

import pytest

from nsqd_py.http_server.request_head import HeadError, parse_head
from tests.http.http_support import parse_raw_reply, raw_exchange
from tests.support import NsqdProcess

ERROR_HEADERS = b"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"


def go_error(public: bytes) -> bytes:
    return b"HTTP/1.1 " + public + ERROR_HEADERS + public


BAD = go_error(b"400 Bad Request")
NO_HOST = go_error(b"400 Bad Request: missing required Host header")
BAD_HOST = go_error(b"400 Bad Request: malformed Host header")
BAD_NAME = go_error(b"400 Bad Request: invalid header name")
BAD_VALUE = go_error(b"400 Bad Request: invalid header value")
UNSUPPORTED_TE = b"HTTP/1.1 501 Not Implemented" + ERROR_HEADERS + b"Unsupported transfer encoding"
VERSION_505 = go_error(b"505 HTTP Version Not Supported: unsupported protocol version")
EXPECTATION_FAILED = b"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: D\r\nContent-Length: 0\r\n\r\n"

PUB = b"POST /pub?topic=heads HTTP/1.1\r\nHost: x\r\n"

#: (request bytes, Go's whole answer): what the server refuses before the app runs
REFUSED = {
    "te gzip": (PUB + b"Transfer-Encoding: gzip\r\nContent-Length: 1\r\n\r\nx", UNSUPPORTED_TE),
    "te xchunked": (PUB + b"Transfer-Encoding: xchunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", UNSUPPORTED_TE),
    "te chunkedx": (PUB + b"Transfer-Encoding: chunkedx\r\n\r\n1\r\nx\r\n0\r\n\r\n", UNSUPPORTED_TE),
    "te list": (PUB + b"Transfer-Encoding: gzip, chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", UNSUPPORTED_TE),
    "te twice": (PUB + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
                 UNSUPPORTED_TE),
    "no host": (b"GET /ping HTTP/1.1\r\n\r\n", NO_HOST),
    "two hosts": (b"GET /ping HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", BAD),
    "host with space": (b"GET /ping HTTP/1.1\r\nHost: a b\r\n\r\n", BAD_HOST),
    "host with slash": (b"GET /ping HTTP/1.1\r\nHost: a/b\r\n\r\n", BAD_HOST),
    "space in name": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX Y: z\r\n\r\n", BAD_NAME),
    "space before colon": (b"GET /ping HTTP/1.1\r\nHost: x\r\nXY : z\r\n\r\n", BAD_NAME),
    "utf-8 name": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX\xc3\xa9: v\r\n\r\n", BAD_NAME),
    "nul in value": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", BAD_VALUE),
    "ctl in value": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", BAD_VALUE),
    "del in value": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX: a\x7fb\r\n\r\n", BAD_VALUE),
    "cr in value": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", BAD_VALUE),
    "nul in url": (b"GET /pi\x00ng HTTP/1.1\r\nHost: x\r\n\r\n", BAD),
    "ctl in query": (b"GET /ping?a=\x01 HTTP/1.1\r\nHost: x\r\n\r\n", BAD),
    "bad escape in path": (b"GET /pi%zzng HTTP/1.1\r\nHost: x\r\n\r\n", BAD),
    "relative url": (b"GET ping HTTP/1.1\r\nHost: x\r\n\r\n", BAD),
    "asterisk with a query": (b"GET *?a=b HTTP/1.1\r\nHost: x\r\n\r\n", BAD),  # recorded from Go nsqd 1.3.0
    "expect other": (b"GET /ping HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n", EXPECTATION_FAILED),
    "HTTP/1.10": (b"GET /ping HTTP/1.10\r\nHost: x\r\n\r\n", BAD),
    "HTTP/1.1x": (b"GET /ping HTTP/1.1x\r\nHost: x\r\n\r\n", BAD),
    "http/1.1": (b"GET /ping http/1.1\r\nHost: x\r\n\r\n", BAD),
    "HTTP/2.0": (b"GET /ping HTTP/2.0\r\nHost: x\r\n\r\n", VERSION_505),
    "HTTP/0.9": (b"GET /ping HTTP/0.9\r\nHost: x\r\n\r\n", VERSION_505),
    "HTTP/3.0": (b"GET /ping HTTP/3.0\r\nHost: x\r\n\r\n", VERSION_505),
    "HTTP/2.0 bad te": (b"GET /ping HTTP/2.0\r\nTransfer-Encoding: gzip\r\n\r\n", UNSUPPORTED_TE),
    "HTTP/2.0 bad line": (b"GET /ping HTTP/2.0\r\nnocolon\r\n\r\n", BAD),
    # Go reads Transfer-Encoding only from HTTP/1.1 on (and for HTTP/0.0, which it takes for 1.1): below that an
    # `identity` is ignored and the head is judged on (recorded from Go nsqd 1.3.0)
    "HTTP/0.9 te identity": (b"POST /pub?topic=t HTTP/0.9\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\nx",
                             VERSION_505),
    "HTTP/0.5 te identity bad length": (
        b"POST /pub?topic=t HTTP/0.5\r\nTransfer-Encoding: identity\r\nContent-Length: x\r\n\r\nx", BAD),
    "HTTP/0.9 te identity two lengths": (
        b"POST /pub?topic=t HTTP/0.9\r\nTransfer-Encoding: identity\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
        BAD),
    "HTTP/0.0 te identity": (b"POST /pub?topic=t HTTP/0.0\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\nx",
                             UNSUPPORTED_TE),
    "length over int64": (PUB + b"Content-Length: 99999999999999999999\r\n\r\nx", BAD),
    "two lengths": (PUB + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nxx", BAD),
    "negative length": (PUB + b"Content-Length: -1\r\n\r\nx", BAD),
    "signed length": (PUB + b"Content-Length: +1\r\n\r\nx", BAD),
    "method not a token": (b"G@T /ping HTTP/1.1\r\nHost: x\r\n\r\n", BAD),
    "two spaces": (b"GET  /ping HTTP/1.1\r\nHost: x\r\n\r\n", BAD),
    "folded first line": (b"GET /ping HTTP/1.1\r\n b\r\nHost: x\r\n\r\n", BAD),
    "lone cr": (b"GET /ping HTTP/1.1\rHost: x\r\n\r\n", BAD),
    "blank lines first": (b"\r\n\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n", BAD),
}

#: requests Go serves although they look odd: (request, status)
SERVED = {
    "te Chunked": (PUB + b"Transfer-Encoding: Chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", 200),
    # ignored on HTTP/1.0, which leaves no length: an empty body, so MSG_EMPTY
    "te on HTTP/1.0": (b"POST /pub?topic=heads HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", 400),
    "no host on 1.0": (b"GET /ping HTTP/1.0\r\n\r\n", 200),
    "empty host": (b"GET /ping HTTP/1.1\r\nHost:\r\n\r\n", 200),
    "tab in value": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX: a\tb\r\n\r\n", 200),
    "latin-1 in value": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX: a\xffb\r\n\r\n", 200),
    "empty header name": (b"GET /ping HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n", 200),
    "absolute url": (b"GET http://x/ping HTTP/1.1\r\nHost: x\r\n\r\n", 200),
    "absolute https url": (b"GET https://x/ping HTTP/1.1\r\nHost: x\r\n\r\n", 200),
    "HTTP/1.2": (b"GET /ping HTTP/1.2\r\nHost: x\r\n\r\n", 200),
    "same length twice": (PUB + b"Content-Length: 1\r\nContent-Length: 1\r\n\r\nx", 200),
    "length with spaces": (PUB + b"Content-Length:  1 \r\n\r\nx", 200),
    "expect 100 without body": (b"GET /ping HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n", 200),
    "star on GET": (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 405),  # nsqd's router answers it
    "folded value": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", 200),
    "bare LF": (b"GET /ping HTTP/1.1\nHost: x\n\n", 200),
}


def _without_date(answer: bytes) -> bytes:
    head, sep, body = answer.partition(b"\r\n\r\n")
    lines = [b"Date: D" if line.startswith(b"Date: ") else line for line in head.split(b"\r\n")]
    return b"\r\n".join(lines) + sep + body


@pytest.mark.parametrize(("data", "answer"), REFUSED.values(), ids=REFUSED.keys())
def test_refused_like_go(shared_nsqd: NsqdProcess, data: bytes, answer: bytes) -> None:
    """The whole answer matches Go's, and comes without the client closing its side."""
    assert _without_date(raw_exchange(shared_nsqd.http_port, data, 2.0)) == answer


@pytest.mark.parametrize(("data", "status"), SERVED.values(), ids=SERVED.keys())
def test_served_like_go(shared_nsqd: NsqdProcess, data: bytes, status: int) -> None:
    assert parse_raw_reply(raw_exchange(shared_nsqd.http_port, data, 1.0)).status == status


def test_http10_answers_name_http10(shared_nsqd: NsqdProcess) -> None:
    plain = _without_date(raw_exchange(shared_nsqd.http_port, b"GET /ping HTTP/1.0\r\n\r\n", 2.0))
    assert plain.startswith(b"HTTP/1.0 200 OK\r\n") and b"Connection:" not in plain
    kept = _without_date(raw_exchange(shared_nsqd.http_port, b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                                       0.5))
    assert kept.startswith(b"HTTP/1.0 200 OK\r\n") and b"\r\nConnection: keep-alive\r\n" in kept


def test_tcp_client_on_the_http_port_is_answered_at_once(shared_nsqd: NsqdProcess) -> None:
    """go-nsq given the HTTP address sends the V2 magic and an IDENTIFY and waits: Go's server answers 400 as
    soon as the first line ends, so the client fails at once instead of at its read timeout."""
    identify = b'{"client_id":"x","feature_negotiation":true}'
    with socket.create_connection(("127.0.0.1", shared_nsqd.http_port), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(b"  V2IDENTIFY\n" + len(identify).to_bytes(4, "big") + identify)
        answer = sock.recv(65536)
        waited = time.monotonic() - started
    assert answer == BAD
    assert waited < 4, "answered at once, not after a timeout"


def test_malformed_header_line_is_answered_before_the_blank_line(shared_nsqd: NsqdProcess) -> None:
    with socket.create_connection(("127.0.0.1", shared_nsqd.http_port), timeout=5) as sock:
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nnocolon\r\n")
        assert sock.recv(65536) == BAD


@pytest.mark.parametrize("split", [False, True])
def test_head_over_1mib_is_431(shared_nsqd: NsqdProcess, split: bool) -> None:
    """Go's limit counts the head even when its end arrived in the same read as the rest."""
    big = b"GET /ping HTTP/1.1\r\nHost: x\r\nX: " + b"a" * ((1 << 20) + 4096) + b"\r\n\r\n"
    answer = raw_exchange(shared_nsqd.http_port, big if not split else big[:-4], 3)
    assert answer == go_error(b"431 Request Header Fields Too Large")
    ping = raw_exchange(shared_nsqd.http_port, b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n", 0.5)
    assert parse_raw_reply(ping).body == b"OK"


def test_head_just_under_the_limit_is_served(shared_nsqd: NsqdProcess) -> None:
    head = b"GET /ping HTTP/1.1\r\nHost: x\r\nX: "
    data = head + b"a" * ((1 << 20) - len(head) - 4) + b"\r\n\r\n"
    assert parse_raw_reply(raw_exchange(shared_nsqd.http_port, data, 1.0)).status == 200


# ---- the parser alone (no process): the same rules, quick to run ----------------------------------------------


HEAD_REFUSED = {name: row for name, row in REFUSED.items() if row[1] != EXPECTATION_FAILED}  # Expect: the server's


@pytest.mark.parametrize(("data", "answer"), HEAD_REFUSED.values(), ids=HEAD_REFUSED.keys())
def test_parse_head_refuses(data: bytes, answer: bytes) -> None:
    head = data.partition(b"\r\n\r\n")[0] if b"\r\n\r\n" in data else data.partition(b"\n\n")[0]
    with pytest.raises(HeadError) as err:
        parse_head(head.decode("latin-1"))
    assert err.value.answer == answer


def test_parse_head_fields() -> None:
    head = parse_head("POST http://h/pub?topic=a%20b HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\n"
                      "Transfer-Encoding: chunked\r\nContent-Length: 5")
    assert (head.method, head.path, head.query, head.minor) == ("POST", "/pub", "topic=a%20b", 1)
    assert head.chunked and head.content_length == 0 and "CONTENT_LENGTH" not in head.fields
    assert head.fields["HTTP_X_A"] == "1,2"
