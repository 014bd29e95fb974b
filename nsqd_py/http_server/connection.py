"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

A served HTTP connection's answers, made cheap for keep-alive clients that send a request and wait.

Two measured costs shape it (wrk -c32 `POST /pub`, 2-core VM, issue 23):

* **Answers go out in one burst per event-loop turn** (runtime/outbox.py). This alone took a /pub from about
  30 to 22 µs of server CPU.
* **After answering, a read waits for the socket before trying it**: the client sends nothing before it has
  the answer, so trying first is a failed recv (a syscall and a Python exception) on every request.

Reads and sends go to the plain socket with gevent's watchers (runtime/transport.py), not through gevent's
socket wrappers (about a third of the Python time before). TLS connections keep gevent's SSL socket
(`TLSConnection`).
"""

from __future__ import annotations

import socket

from ..runtime.listen import send_all
from ..runtime.outbox import Outbox
from ..runtime.transport import PlainTransport


class PlainConnection:
    """A TCP or unix connection: answers are queued and go out through the outbox at the end of the loop turn.
    Takes the socket over from gevent's wrapper (which is closed by this)."""

    __slots__ = ("_in_outbox", "_outbox", "_queued", "_transport")

    def __init__(self, wrapped: socket.socket, outbox: Outbox) -> None:
        self._transport = PlainTransport(wrapped, self._send_failed)
        self._outbox = outbox
        self._queued: list[bytes] = []
        self._in_outbox = False

    def recv(self, size: int) -> bytes:
        return self._transport.recv(size)

    def write(self, data: bytes) -> None:
        """Queue ``data``; it is sent at the end of this loop turn, after what was written before."""
        self._queued.append(data)
        self._transport.answered = True
        if not self._in_outbox:
            self._in_outbox = True
            self._outbox.add(self)

    def push(self) -> None:
        """Send what is queued without blocking (the outbox calls this in the hub)."""
        self._in_outbox = False
        queued = self._queued
        if queued:
            data = queued[0] if len(queued) == 1 else b"".join(queued)
            queued.clear()
            self._transport.send(data)

    def flush(self) -> None:
        """Block until everything written is sent (before a close, or for a connection about to linger)."""
        self.push()
        self._transport.drain()

    def _send_failed(self, err: Exception) -> None:
        """The peer is gone: the reader sees that on its next recv."""

    def set_nodelay(self) -> None:
        self._transport.set_nodelay()

    def shutdown_write(self) -> None:
        self._transport.shutdown_write()

    def close(self) -> None:
        self._transport.close()


class TLSConnection:
    """A connection through gevent's SSL socket: each answer is sent as it is written."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def recv(self, size: int) -> bytes:
        return self._sock.recv(size)

    def write(self, data: bytes) -> None:
        send_all(self._sock, data)

    def flush(self) -> None:
        """Nothing waits: `write` sent it."""

    def set_nodelay(self) -> None:
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def shutdown_write(self) -> None:
        self._sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._sock.close()


Connection = PlainConnection | TLSConnection
