"""runtime/transport.py and http_server/connection.py on socket pairs: sends never block their caller and stay in order,
what the socket cannot take at once is finished by a sender greenlet (within the write deadline where there is
one), a read after an answer waits for data, and HTTP answers written in one loop turn go out together."""

from __future__ import annotations

import socket

import gevent
from gevent import socket as gsocket

from nsqd_py.http_server.connection import PlainConnection
from nsqd_py.runtime.outbox import Outbox
from nsqd_py.runtime.transport import PlainTransport, SendTimeout


def _socketpair(sndbuf: int | None) -> tuple[gsocket.socket, gsocket.socket]:
    ours, theirs = gsocket.socketpair()
    if sndbuf is not None:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    return ours, theirs


def _pair(sndbuf: int | None = None) -> tuple[PlainTransport, gsocket.socket, list[Exception]]:
    ours, theirs = _socketpair(sndbuf)
    failures: list[Exception] = []
    return PlainTransport(ours, failures.append), theirs, failures


def _http_pair(sndbuf: int | None = None) -> tuple[PlainConnection, gsocket.socket]:
    ours, theirs = _socketpair(sndbuf)
    return PlainConnection(ours, Outbox()), theirs


def _read(sock: gsocket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(65536)
        assert chunk, "closed early"
        data += chunk
    return data


def test_a_send_bigger_than_the_socket_takes_returns_at_once_and_arrives_in_order() -> None:
    transport, peer, failures = _pair(sndbuf=4096)
    big = bytes(range(256)) * 4096  # 1 MiB
    transport.send(big)  # returns with most of it still queued: nobody reads yet
    transport.send(b"after")  # goes behind the rest, never before it
    assert _read(peer, len(big) + 5) == big + b"after"
    transport.drain()
    assert failures == []
    transport.close()
    peer.close()


def test_drain_waits_until_everything_is_sent() -> None:
    transport, peer, failures = _pair(sndbuf=4096)
    reader = gevent.spawn(_read, peer, 300_000)
    transport.send(b"x" * 300_000)
    transport.drain()
    transport.close()
    assert reader.get(timeout=10) == b"x" * 300_000
    assert failures == []
    peer.close()


def test_a_peer_that_reads_nothing_fails_the_send_at_the_write_deadline() -> None:
    transport, peer, failures = _pair(sndbuf=4096)
    transport.write_timeout = 0.2
    transport.send(b"y" * 2_000_000)
    gevent.sleep(1.0)
    assert len(failures) == 1 and isinstance(failures[0], SendTimeout), failures
    assert str(failures[0]) == "i/o timeout"
    transport.close()
    peer.close()


def test_a_send_to_a_closed_peer_is_reported_not_raised() -> None:
    transport, peer, failures = _pair()
    peer.close()
    transport.send(b"z")
    transport.send(b"z")
    assert failures and all(isinstance(err, OSError) for err in failures)
    transport.close()


def test_a_read_after_an_answer_waits_for_the_request() -> None:
    transport, peer, _failures = _pair()
    transport.send(b"answer")
    assert transport.answered
    gevent.spawn_later(0.05, peer.sendall, b"next command\n")
    assert transport.recv(100) == b"next command\n"
    assert not transport.answered
    assert _read(peer, 6) == b"answer"
    peer.close()
    assert transport.recv(100) == b""  # EOF
    transport.close()


# ---- HTTP: answers through the outbox -------------------------------------------------------------------

def test_answers_of_one_turn_arrive_in_order() -> None:
    conn, peer = _http_pair()
    conn.write(b"first ")
    conn.write(b"second")
    assert _read(peer, 12) == b"first second"
    conn.close()
    peer.close()


def test_an_answer_bigger_than_the_socket_takes_is_finished_later() -> None:
    conn, peer = _http_pair(sndbuf=4096)
    big = bytes(range(256)) * 4096  # 1 MiB
    conn.write(big)
    gevent.sleep(0.05)  # the outbox sent what fit; a sender greenlet holds the rest
    conn.write(b"after")  # queued behind the rest, never before it
    assert _read(peer, len(big) + 5) == big + b"after"
    conn.flush()
    conn.close()
    peer.close()


def test_flush_before_close_sends_everything() -> None:
    conn, peer = _http_pair(sndbuf=4096)
    reader = gevent.spawn(_read, peer, 300_000)
    conn.write(b"x" * 300_000)
    conn.flush()
    conn.close()
    assert reader.get(timeout=10) == b"x" * 300_000
    peer.close()


def test_close_stops_a_sender_whose_peer_reads_nothing() -> None:
    conn, peer = _http_pair(sndbuf=4096)
    conn.write(b"y" * 1_000_000)
    gevent.sleep(0.05)
    closing = gevent.spawn(conn.close)  # must not wait for the sender, which waits for a writable socket
    closing.join(timeout=10)
    assert closing.successful(), "close() waited for the peer to read"
    received = b""
    while chunk := peer.recv(65536):  # what was sent, then the end: the rest was dropped, not sent later
        received += chunk
    assert 0 < len(received) < 1_000_000 and set(received) == {ord("y")}
    peer.close()
