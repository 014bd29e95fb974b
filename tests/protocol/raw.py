"""Protocol V2 helpers over RawConn: publish, subscribe, receive, and the socket variants (unix, tiny window)."""

from __future__ import annotations

import socket
from contextlib import ExitStack, closing
from typing import Any

from nsqd_py.client.protocol import mpub_body
from tests.support import FRAME_RESPONSE, Message, RawConn


def pub(conn: RawConn, topic: str, body: bytes) -> None:
    """PUB on ``conn`` and expect OK (use a connection that cannot receive messages at the same time)."""
    conn.send(f"PUB {topic}", body)
    assert conn.frame() == (FRAME_RESPONSE, b"OK")


def publish(port: int, topic: str, *bodies: bytes) -> None:
    """PUB (one body) or MPUB (several) from a short-lived connection."""
    conn = RawConn(port)
    try:
        if len(bodies) == 1:
            conn.send(f"PUB {topic}", bodies[0])
        else:
            conn.send(f"MPUB {topic}", mpub_body(list(bodies)))
        assert conn.frame() == (FRAME_RESPONSE, b"OK")
    finally:
        conn.close()


def raw_subscriber(port: int, topic: str, channel: str, rdy: int | None = None, **identify: Any) -> RawConn:
    conn = RawConn(port)
    if identify:
        reply = conn.identify(**identify)
        assert isinstance(reply, dict), reply
    assert conn.sub(topic, channel) == (FRAME_RESPONSE, b"OK")
    if rdy is not None:
        conn.send(f"RDY {rdy}")
    return conn


def delivered(port: int, topic: str, body: bytes, cleanup: ExitStack) -> tuple[RawConn, Message]:
    """A subscriber of channel "ch" with RDY 1 (closed by ``cleanup``) and ``body`` published and delivered to it."""
    sub = cleanup.enter_context(closing(raw_subscriber(port, topic, "ch", rdy=1)))
    publish(port, topic, body)
    return sub, recv_message(sub)


def recv_message(conn: RawConn, timeout: float = 5) -> Message:
    conn.sock.settimeout(timeout)
    return conn.message()


def unix_conn(path: str, timeout: float = 5) -> RawConn:
    """A :class:`RawConn` over a unix domain socket."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(path)
    return RawConn(sock, timeout=timeout)


def tiny_window_conn(port: int, rcvbuf: int = 4096, timeout: float = 5) -> RawConn:
    """A :class:`RawConn` over TCP whose receive buffer is set tiny before connecting, so a client that stops
    reading pushes back on the server almost at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect(("127.0.0.1", port))
    return RawConn(sock, timeout=timeout)


def nothing_arrives(conn: RawConn, seconds: float) -> bool:
    """True when no frame (other than answered heartbeats) arrives within ``seconds``."""
    conn.sock.settimeout(seconds)
    try:
        conn.frame()
    except TimeoutError:
        return True
    return False


def settled_ok(conn: RawConn, topic: str) -> None:
    """Prove earlier FIN/REQ/TOUCH/RDY lines caused no error: a PUB's OK must be the next frame."""
    conn.send(f"PUB {topic}", b"probe")
    conn.sock.settimeout(5)
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
