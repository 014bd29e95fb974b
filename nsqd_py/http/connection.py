"""A served HTTP connection's bytes in and out, made cheap for keep-alive clients that send a request and wait.

Two measured costs shape it (wrk -c32 `POST /pub`, 2-core VM, issue 23):

* **Answers go out in one burst per event-loop turn** (runtime/outbox.py). This alone took a /pub from about
  30 to 22 µs of server CPU.
* **After answering, a read waits for the socket before trying it**: the client sends nothing before it has
  the answer, so trying first is a failed recv (a syscall and a Python exception) on every request.

Reads and sends go to the plain socket with gevent's watchers, not through gevent's socket wrappers (about a
third of the Python time before). TLS connections keep gevent's SSL socket (`TLSConnection`).
"""

from __future__ import annotations

import _socket
import socket
from typing import Any

import gevent
from gevent.hub import get_hub

from ..runtime.listen import send_all
from ..runtime.outbox import Outbox

_READ, _WRITE = 1, 2


class PlainConnection:
    """A TCP or unix connection: non-blocking reads and sends on the socket itself, answers through the outbox.
    Takes the socket over from gevent's wrapper (which is closed by this)."""

    __slots__ = ("_answered", "_flushing", "_hub", "_in_outbox", "_outbox", "_queued", "_read_watcher", "_sender",
                 "_sock", "_write_watcher")

    def __init__(self, wrapped: socket.socket, outbox: Outbox) -> None:
        self._sock = _socket.socket(fileno=wrapped.detach())
        self._sock.setblocking(False)
        self._hub = get_hub()
        loop = self._hub.loop
        self._read_watcher = loop.io(self._sock.fileno(), _READ)
        self._write_watcher = loop.io(self._sock.fileno(), _WRITE)
        self._outbox = outbox
        self._queued: list[bytes] = []
        self._in_outbox = False
        self._sender: Any = None  # the greenlet finishing an answer the socket could not take at once
        self._flushing = False  # a greenlet is in flush(): it sends everything queued itself
        self._answered = False

    def recv(self, size: int) -> bytes:
        if self._answered:  # the client waits for the answer before it sends more: wait, do not try
            self._answered = False
            self._hub.wait(self._read_watcher)
        while True:
            try:
                return self._sock.recv(size)
            except BlockingIOError:
                self._hub.wait(self._read_watcher)

    def write(self, data: bytes) -> None:
        """Queue ``data``; it is sent at the end of this loop turn, after what was written before."""
        self._queued.append(data)
        self._answered = True
        if not self._in_outbox:
            self._in_outbox = True
            self._outbox.add(self)

    def push(self) -> None:
        """Send what is queued without blocking (the outbox calls this in the hub); a rest the socket cannot
        take now is left to a greenlet that waits until it can."""
        self._in_outbox = False
        if self._sender is not None or self._flushing or not self._queued:
            return  # the sender (or the flushing greenlet) takes everything queued, in order
        try:
            self._send_some()
        except OSError:
            self._queued.clear()  # the peer is gone: the reader sees that on its next recv
            return
        if self._queued:
            self._sender = gevent.spawn(self._send_rest)

    def flush(self) -> None:
        """Block until everything written is sent (before a close, or for a connection about to linger)."""
        if self._sender is not None:
            self._sender.join()
        self._flushing = True
        try:
            while self._queued:
                self._send_some()
                if self._queued:
                    self._hub.wait(self._write_watcher)
        finally:
            self._flushing = False

    def _send_rest(self) -> None:
        try:
            while self._queued:
                self._hub.wait(self._write_watcher)
                self._send_some()
        except OSError:
            self._queued.clear()
        finally:
            self._sender = None

    def _send_some(self) -> None:
        data = self._queued[0] if len(self._queued) == 1 else b"".join(self._queued)
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        self._queued = [data[sent:]] if sent < len(data) else []

    def set_nodelay(self) -> None:
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def shutdown_write(self) -> None:
        self._sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        if self._sender is not None:  # the connection broke while a big answer was still going out
            self._sender.kill()
        self._read_watcher.close()
        self._write_watcher.close()
        self._sock.close()


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
