"""admin/plain_http.py against a scripted server on a real socket: bodies by Content-Length, chunked and to the end
of the connection; kept connections reused, and a kept connection the server closed replaced without an error; the
failures (refused, timed out, cut off) named for upstream.py to word as Go does."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from nsqd_py.admin.plain_http import AnswerFailed, ConnectFailed, PlainHTTP

OK_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\n\r\n"
TO_THE_END = b"HTTP/1.0 404 Not Found\r\n\r\nno such"


class Scripted:
    """Answers each request it reads with the next answer of ``answers``; a connection is closed after
    ``per_connection`` answers, and after an HTTP/1.0 answer (as such a server ends its body)."""

    def __init__(self, answers: list[bytes], per_connection: int = 100) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.answers = answers
        self.per_connection = per_connection
        self.connections = 0
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                for _ in range(self.per_connection):
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    if not data or not self.answers:
                        break
                    self.requests.append(data)
                    answer = self.answers.pop(0)
                    conn.sendall(answer)
                    if answer.startswith(b"HTTP/1.0"):
                        break


@pytest.fixture
def client() -> Iterator[PlainHTTP]:
    http = PlainHTTP(1.0, 1.0, {"Accept": "application/vnd.nsq; version=1.0"})
    yield http
    http.close()


def test_bodies_by_length_chunked_and_to_the_end(client: PlainHTTP) -> None:
    server = Scripted([OK_LENGTH, CHUNKED, TO_THE_END])
    assert client.get("127.0.0.1", server.port, "/stats?format=json") == (200, b"hello")
    assert client.get("127.0.0.1", server.port, "/a") == (200, b"abcdefg")
    assert client.get("127.0.0.1", server.port, "/b") == (404, b"no such")
    assert server.connections == 1  # kept alive until the HTTP/1.0 answer without a length
    first = server.requests[0]
    assert first.startswith(b"GET /stats?format=json HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{server.port}\r\n".encode() in first
    assert b"Accept: application/vnd.nsq; version=1.0\r\n" in first


def test_a_kept_connection_the_server_closed_is_replaced(client: PlainHTTP) -> None:
    server = Scripted([OK_LENGTH, OK_LENGTH], per_connection=1)
    assert client.get("127.0.0.1", server.port, "/") == (200, b"hello")
    assert client.get("127.0.0.1", server.port, "/") == (200, b"hello")  # the kept one was closed: a new one
    assert server.connections == 2


def test_refused_timed_out_and_cut_off(client: PlainHTTP) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    with pytest.raises(ConnectFailed) as refused:
        client.get("127.0.0.1", port, "/")
    assert isinstance(refused.value.cause, ConnectionRefusedError)

    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel does) and never answers
    with pytest.raises(AnswerFailed) as slow:
        client.get("127.0.0.1", silent.getsockname()[1], "/")
    assert slow.value.timed_out
    silent.close()

    cut = Scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nonly this"], per_connection=1)
    with pytest.raises(AnswerFailed) as ended:
        client.get("127.0.0.1", cut.port, "/")
    assert not ended.value.timed_out


def test_interim_answers_are_skipped_for_the_final_one(client: PlainHTTP) -> None:
    continued = b"HTTP/1.1 100 Continue\r\n\r\n" + OK_LENGTH
    hinted = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" + CHUNKED
    server = Scripted([continued, hinted, OK_LENGTH])
    assert client.get("127.0.0.1", server.port, "/stats") == (200, b"hello")
    assert client.get("127.0.0.1", server.port, "/stats") == (200, b"abcdefg")
    assert client.get("127.0.0.1", server.port, "/stats") == (200, b"hello")  # nothing of the interims left over
    assert server.connections == 1


def test_too_many_interim_answers_fail(client: PlainHTTP) -> None:
    server = Scripted([b"HTTP/1.1 100 Continue\r\n\r\n" * 6 + OK_LENGTH], per_connection=1)
    with pytest.raises(AnswerFailed):
        client.get("127.0.0.1", server.port, "/")


def test_multi_megabyte_bodies_arrive_whole(client: PlainHTTP) -> None:
    """A large /stats, by Content-Length and chunked, in many reads (the buffer is appended to, not rebuilt)."""
    body = bytes(range(256)) * (6 * 4096)  # 6 MiB
    by_length = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    piece = 100_000
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n" % len(body[at:at + piece]) + body[at:at + piece] + b"\r\n" for at in range(0, len(body), piece)
    ) + b"0\r\n\r\n"
    server = Scripted([by_length, chunked, TO_THE_END.replace(b"no such", body)])
    for _ in range(3):
        status, got = client.get("127.0.0.1", server.port, "/stats?format=json")
        assert status in (200, 404)
        assert len(got) == len(body)
        assert got == body
