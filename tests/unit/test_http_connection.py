"""http/connection.py on socket pairs: answers written in one loop turn go out together, in order, and an answer
the socket cannot take at once is finished by a sender greenlet (also when more is written meanwhile)."""

from __future__ import annotations

import socket

import gevent
from gevent import socket as gsocket

from nsqd_py.http.connection import PlainConnection
from nsqd_py.runtime.outbox import Outbox


def _pair(sndbuf: int | None = None) -> tuple[PlainConnection, gsocket.socket]:
    ours, theirs = gsocket.socketpair()
    if sndbuf is not None:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    return PlainConnection(ours, Outbox()), theirs


def _read(sock: gsocket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(65536)
        assert chunk, "closed early"
        data += chunk
    return data


def test_answers_of_one_turn_arrive_in_order() -> None:
    conn, peer = _pair()
    conn.write(b"first ")
    conn.write(b"second")
    assert _read(peer, 12) == b"first second"
    conn.close()
    peer.close()


def test_an_answer_bigger_than_the_socket_takes_is_finished_later() -> None:
    conn, peer = _pair(sndbuf=4096)
    big = bytes(range(256)) * 4096  # 1 MiB
    conn.write(big)
    gevent.sleep(0.05)  # the outbox sent what fit; a sender greenlet holds the rest
    conn.write(b"after")  # queued behind the rest, never before it
    assert _read(peer, len(big) + 5) == big + b"after"
    conn.flush()
    conn.close()
    peer.close()


def test_flush_before_close_sends_everything() -> None:
    conn, peer = _pair(sndbuf=4096)
    reader = gevent.spawn(_read, peer, 300_000)
    conn.write(b"x" * 300_000)
    conn.flush()
    conn.close()
    assert reader.get(timeout=10) == b"x" * 300_000
    peer.close()


def test_close_stops_a_sender_whose_peer_reads_nothing() -> None:
    conn, peer = _pair(sndbuf=4096)
    conn.write(b"y" * 1_000_000)
    gevent.sleep(0.05)
    conn.close()  # must not hang on the sender waiting for a writable socket
    peer.close()
