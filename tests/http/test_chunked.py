"""Chunked request bodies parsed as Go's net/http parses them, and broken ones that must never wedge the server.

The first rows are the defect where a chunk size of `-1` put nsqd into an endless loop: no client was
served again and SIGTERM could not stop it. Go answers 500 (nsqd's failed ReadAll) and closes.
"""

from __future__ import annotations

import socket
import time

import pytest

from nsqd_py.client.protocol import mpub_body
from tests.http.http_support import NsqdFactory, parse_raw_reply, raw_exchange
from tests.support import NsqdProcess, RawConn, drain, request, wait_until


def _chunked(target: str, body: bytes, method: str = "POST") -> bytes:
    return f"{method} {target} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + body


def _assert_serves_others(nsqd: NsqdProcess) -> None:
    """A fresh HTTP client and a fresh TCP client are both answered within a second."""
    assert request(nsqd.http_port, "GET", "/ping", timeout=1).body == b"OK"
    conn = RawConn(nsqd.tcp_port, timeout=1)
    try:
        conn.send("NOP")
        conn.send("PUB bystander", b"x")
        assert conn.frame() == (0, b"OK")
    finally:
        conn.close()


@pytest.mark.parametrize("target", ["/pub?topic=t", "/mpub?topic=t"])
def test_negative_chunk_size_is_a_500_and_the_server_goes_on(shared_nsqd: NsqdProcess, target: str) -> None:
    reply = parse_raw_reply(raw_exchange(shared_nsqd.http_port, _chunked(target, b"-1\r\nx"), timeout=3))
    assert (reply.status, reply.json()) == (500, {"message": "INTERNAL_ERROR"})
    assert reply.header("Connection") == "close"
    _assert_serves_others(shared_nsqd)


def test_negative_chunk_size_on_config_put(shared_nsqd: NsqdProcess) -> None:
    data = _chunked("/config/nsqlookupd_tcp_addresses", b"-1\r\nx", method="PUT")
    reply = parse_raw_reply(raw_exchange(shared_nsqd.http_port, data, timeout=3))
    assert reply.status == 500
    _assert_serves_others(shared_nsqd)


@pytest.mark.parametrize("size", [b"-1", b"+5", b"1_0", b" 5", b"0x3", b"zz", b"5 5", b"1" * 17])
def test_bad_chunk_sizes_are_answered_at_once(shared_nsqd: NsqdProcess, size: bytes) -> None:
    """Python's int(x, 16) takes several of these; Go's parser takes only hex digits. The answer comes
    without waiting for more input (the connection stays open on the client's side)."""
    with socket.create_connection(("127.0.0.1", shared_nsqd.http_port), timeout=3) as sock:
        sock.sendall(_chunked("/pub?topic=chunks", size + b"\r\nhello\r\n"))
        reply = parse_raw_reply(sock.recv(65536))
    assert (reply.status, reply.json()) == (500, {"message": "INTERNAL_ERROR"})
    _assert_serves_others(shared_nsqd)


@pytest.mark.parametrize("size", [b"5", b"5 ", b"5\t", b"5;name=value", b"05", b"0000000000000005", b"5 \r \r"])
def test_valid_chunk_sizes(shared_nsqd: NsqdProcess, size: bytes) -> None:
    data = _chunked("/pub?topic=chunks_ok", size + b"\r\nhello\r\n0\r\n\r\n")
    with socket.create_connection(("127.0.0.1", shared_nsqd.http_port), timeout=3) as sock:
        sock.sendall(data)
        reply = parse_raw_reply(sock.recv(65536))
    assert (reply.status, reply.body) == (200, b"OK")


#: chunked bodies Go nsqd 1.3.0 keeps reading (recorded): an empty chunk-size line is Go 1.19's size 0, the last
#: chunk, and what follows the last chunk is a trailer that needs its CRLF CRLF, or at least two bytes
STILL_READING = {
    "empty size on config": (b"PUT /config/log_level HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                             b"Content-Length: 6\r\n\r\n9\r\n\"info\"\r\n0\r\n\r\n"),
    "empty size on pub": _chunked("/pub?topic=t", b"5\r\nhello\r\n\r\n"),
    "one byte after the last chunk": _chunked("/pub?topic=t", b"5\nhello\r\n0\n\n"),
    "trailer without its blank line": _chunked("/pub?topic=t", b"5\r\nhello\r\n0\r\nX: y\n\n"),
    "half a trailer": _chunked("/pub?topic=t", b"5\r\nhello\r\n0\r\nX"),
}


@pytest.mark.parametrize("data", STILL_READING.values(), ids=STILL_READING.keys())
def test_unfinished_chunked_bodies_wait_like_go(shared_nsqd: NsqdProcess, data: bytes) -> None:
    """No answer while the body may still come (a client's broken body is never our 500)."""
    with socket.create_connection(("127.0.0.1", shared_nsqd.http_port), timeout=1) as sock:
        sock.sendall(data)
        with pytest.raises(TimeoutError):
            sock.recv(65536)
    _assert_serves_others(shared_nsqd)


@pytest.mark.parametrize(("trailer", "status"), [
    (b"X: y\r\n\r\n", 200),
    (b"X: y\n\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n", 200),
    (b"Xy\r\n\r\n", 500),  # no colon
    (b" X: y\r\n\r\n", 500),  # folded first line
])
def test_trailers_like_go(shared_nsqd: NsqdProcess, trailer: bytes, status: int) -> None:
    data = _chunked("/pub?topic=trailers", b"5\r\nhello\r\n0\r\n" + trailer)
    with socket.create_connection(("127.0.0.1", shared_nsqd.http_port), timeout=3) as sock:
        sock.sendall(data)
        assert parse_raw_reply(sock.recv(65536)).status == status


def test_chunk_data_must_end_with_crlf(shared_nsqd: NsqdProcess) -> None:
    reply = parse_raw_reply(raw_exchange(shared_nsqd.http_port, _chunked("/pub?topic=t", b"5\r\nhelloXY0\r\n\r\n"),
                                         timeout=3))
    assert reply.status == 500


def test_sigterm_flushes_and_exits_while_connections_misbehave(nsqd_factory: NsqdFactory) -> None:
    """Messages held in memory survive a SIGTERM given while one HTTP connection sent a broken chunked body,
    one sent half a request head, and one TCP client sent half a command."""
    nsqd = nsqd_factory("--mem-queue-size=10000")
    data_path = nsqd.data_path
    bodies = [f"m{i}".encode() for i in range(500)]
    assert request(nsqd.http_port, "POST", "/mpub?topic=keep&binary=true", mpub_body(bodies)).body == b"OK"
    offenders = [socket.create_connection(("127.0.0.1", nsqd.http_port), timeout=3) for _ in range(2)]
    offenders.append(socket.create_connection(("127.0.0.1", nsqd.tcp_port), timeout=3))
    offenders[0].sendall(_chunked("/pub?topic=keep", b"-1\r\nx"))
    offenders[1].sendall(b"POST /pub?topic=keep HTTP/1.1\r\nHost: x\r\nContent-Le")
    offenders[2].sendall(b"  V2PUB keep\n\x00\x00\x00\x10half")
    time.sleep(0.3)
    _assert_serves_others(nsqd)
    started = time.monotonic()
    assert nsqd.stop(timeout=15) == 0
    assert time.monotonic() - started < 10
    for sock in offenders:
        sock.close()
    restarted = nsqd_factory(data_path=data_path)
    wait_until(lambda: restarted.stats(topic="keep")["topics"])
    channel_bodies = [m.body for m in drain(restarted.tcp_port, "keep", "after", idle=0.5)]
    assert sorted(channel_bodies) == sorted(bodies)


@pytest.mark.parametrize(("body", "status", "answer"), [
    (b"-1\r\nx", 413, b'{"message":"BAD_BODY"}'),
    (b"4\r\n\x00\x00\x00\x01\r\n-1\r\n", 413, b'{"message":"BAD_MESSAGE"}'),
    (b"9\r\n\x00\x00\x00\x01\x00\x00\x00\x01a\r\nzz\r\n", 200, b"OK"),
])
def test_broken_chunked_binary_mpub_is_answered_from_what_arrived(shared_nsqd: NsqdProcess, body: bytes,
                                                                  status: int, answer: bytes) -> None:
    """nsqd parses a binary MPUB while reading it: a body that breaks off after its declared messages still
    publishes them (the connection closes, as the rest of the stream is lost)."""
    reply = parse_raw_reply(raw_exchange(shared_nsqd.http_port, _chunked("/mpub?topic=bin&binary=true", body),
                                         timeout=3))
    assert (reply.status, reply.body, reply.header("Connection")) == (status, answer, "close")
