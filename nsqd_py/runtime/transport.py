"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

A served connection's bytes in and out, cheap for clients that send one request and wait for its answer.

Most applications publish one message per PUB (or POST) and wait for its OK, and consume at RDY 1: one message,
FIN, the next. Per round trip, gevent's socket wrappers cost more than the request itself (issues 23 and 29): a
failed recv (a syscall and an exception) before every wait, a timer per wait for the socket's timeout, and a
Timeout per send. So a plain socket is driven here by the hub's watchers directly:

* after the connection answered, a read waits for the socket before trying it (the client sends nothing before
  it has the answer);
* a send never blocks the caller: what the socket does not take at once is finished by a greenlet that waits
  until it can, within the write deadline if there is one (the only place a Timeout is made; rare);
* a read deadline, where the protocol has one, is the caller's business (ClientV2 keeps one lazily re-armed
  timer), not a socket timeout.

TLS connections keep gevent's SSL socket (`TLSTransport`), which waits by itself; their sends always go through
the sending greenlet. Both front doors use these: tcp/client.py and http_server/connection.py.
"""

from __future__ import annotations

import _socket
import contextlib
import os
import socket
from collections.abc import Callable
from typing import Any

import gevent
from gevent.hub import get_hub, getcurrent

from .listen import send_all

_READ, _WRITE = 1, 2
#: unread input read away before a close, at most (a client that keeps sending gets its reset after all)
_DISCARD_SIZE, _DISCARD_READS = 1 << 20, 4


class SendTimeout(Exception):
    """The peer did not take what was sent within the write deadline."""

    def __str__(self) -> str:
        return "i/o timeout"


class Transport:
    """What both transports share: sends in order, without blocking the caller."""

    __slots__ = ("_failed", "_queued", "_sender", "answered", "write_timeout")

    def __init__(self, failed: Callable[[Exception], None]) -> None:
        self._failed = failed
        self._queued: list[bytes] = []
        self._sender: Any = None  # the greenlet finishing what the socket could not take at once
        #: seconds a send may wait for the peer (nsqd's write deadline, the heartbeat interval); 0: no limit
        self.write_timeout = 0.0
        #: something was sent since the last read: the next read waits before trying
        self.answered = False

    def recv(self, size: int) -> bytes:
        raise NotImplementedError

    def send(self, data: bytes) -> None:
        """Send ``data`` after everything sent before; never blocks. A failure is reported to ``failed``."""
        self.answered = True
        if self._sender is not None:
            self._queued.append(data)
            return
        try:
            rest = self._send_now(data)
        except OSError as err:
            self._failed(err)
            return
        if rest:
            self._queued.append(rest)
            self._sender = gevent.spawn(self._send_rest)

    def drain(self) -> None:
        """Wait until everything sent so far is on the wire (before the transport is upgraded)."""
        sender = self._sender
        if sender is not None:
            sender.join()

    def _send_rest(self) -> None:
        try:
            with gevent.Timeout(self.write_timeout or None, SendTimeout()):
                while self._queued:
                    data = self._queued[0] if len(self._queued) == 1 else b"".join(self._queued)
                    self._queued.clear()
                    self._send_waiting(data)
        except (OSError, SendTimeout) as err:
            self._queued.clear()
            self._failed(err)
        finally:
            self._sender = None

    def _send_now(self, data: bytes) -> bytes:
        """Send what the socket takes at once; returns the rest."""
        raise NotImplementedError

    def _send_waiting(self, data: bytes) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Stop both directions (the reader wakes to EOF); the descriptor stays until `close`."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _stop_sender(self) -> None:
        if self._sender is not None:
            self._sender.kill(block=False)
            self._sender = None


class PlainTransport(Transport):
    """A TCP or unix socket with the hub's watchers. Takes the socket over from gevent's wrapper (which is closed
    by this)."""

    __slots__ = ("_hub", "_read_watcher", "_sock", "_write_watcher")

    def __init__(self, wrapped: socket.socket, failed: Callable[[Exception], None]) -> None:
        super().__init__(failed)
        self._sock = _socket.socket(fileno=wrapped.detach())
        self._sock.setblocking(False)
        self._hub = get_hub()
        loop = self._hub.loop
        self._read_watcher = loop.io(self._sock.fileno(), _READ)
        self._write_watcher = loop.io(self._sock.fileno(), _WRITE)

    def recv(self, size: int) -> bytes:
        if self.answered:  # the client waits for the answer before it sends more: wait, do not try
            self.answered = False
            self._wait_readable()
        while True:
            try:
                return self._sock.recv(size)
            except BlockingIOError:
                self._wait_readable()

    def _wait_readable(self) -> None:
        """Sleep until the socket is readable. The watcher switches straight back to this greenlet: the hub's
        `wait` puts a Waiter between them, a cost on every round trip. A switch from anywhere else ends the wait
        early, and the read that follows finds nothing and waits again."""
        watcher = self._read_watcher
        watcher.start(getcurrent().switch)
        try:
            self._hub.switch()
        finally:
            watcher.stop()

    def _send_now(self, data: bytes) -> bytes:
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            return data
        return data[sent:] if sent < len(data) else b""

    def _send_waiting(self, data: bytes) -> None:
        with memoryview(data) as view:
            sent = 0
            while sent < len(data):
                try:
                    sent += self._sock.send(view[sent:])
                except BlockingIOError:
                    self._hub.wait(self._write_watcher)

    def set_nodelay(self) -> None:
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def shutdown_write(self) -> None:
        self._sock.shutdown(socket.SHUT_WR)

    def dup_socket(self) -> socket.socket:
        """A gevent socket on a duplicate of this one's descriptor (for a TLS handshake that may fail)."""
        from gevent import socket as gsocket

        return gsocket.socket(fileno=os.dup(self._sock.fileno()))

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Input that arrived but was never read is taken first: closing over it would reset the connection,
        and a reset makes the peer drop the last answer (a fatal error's frame) before it reads it."""
        self._stop_sender()
        self._read_watcher.close()
        self._write_watcher.close()
        with contextlib.suppress(OSError):
            for _ in range(_DISCARD_READS):
                if not self._sock.recv(_DISCARD_SIZE):
                    break
        self._sock.close()


class TLSTransport(Transport):
    """gevent's SSL socket, which waits by itself; every send goes through the sending greenlet."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket, failed: Callable[[Exception], None]) -> None:
        super().__init__(failed)
        self._sock = sock

    def recv(self, size: int) -> bytes:
        self.answered = False
        return self._sock.recv(size)

    def _send_now(self, data: bytes) -> bytes:
        return data

    def _send_waiting(self, data: bytes) -> None:
        send_all(self._sock, data)

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop_sender()
        self._sock.close()
