"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Records between the broker and an I/O worker process over one unix stream socket (issue 37).

A record is a header (payload length, kind, connection number) and its payload. Records written during a loop
turn leave together in one send, as answers to clients do (outbox.py), so the hop costs a fraction of a
microsecond per record under load; the reader hands over every record a read brought, in order.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

from .outbox import Outbox
from .transport import PlainTransport

HEADER = struct.Struct(">IBI")
_RECV_SIZE = 1 << 18

#: what the reader calls for each record: (kind, connection number, payload); it must not block
RecordHandler = Callable[[int, int, bytes], None]


class Link:
    """One end of a broker-worker link. `run` reads until the other end closes."""

    __slots__ = ("_out", "_outbox", "_queued", "_transport", "closed")

    def __init__(self, sock: socket.socket) -> None:
        self._transport = PlainTransport(sock, self._send_failed)
        self._out: list[bytes] = []
        self._queued = False
        self._outbox = Outbox()
        self.closed = False

    def send(self, kind: int, conn: int, payload: bytes = b"") -> None:
        """Queue a record; it leaves with this loop turn's others."""
        out = self._out
        out.append(HEADER.pack(len(payload), kind, conn))
        if payload:
            out.append(payload)
        if not self._queued:
            self._queued = True
            self._outbox.add(self)

    def push(self) -> None:
        self._queued = False
        out = self._out
        if out and not self.closed:
            data = b"".join(out)
            out.clear()
            self._transport.send(data)

    def flush(self) -> None:
        """Send what is queued and wait until it is on the wire (before this end closes)."""
        self.push()
        self._transport.drain()

    def run(self, handle: RecordHandler, after_read: Callable[[], None] | None = None) -> None:
        """Hand every record to ``handle`` until the other end closes (or the link fails); ``after_read`` is called
        once the records of a read were handled."""
        recv = self._transport.recv
        unpack = HEADER.unpack_from
        size_of_header = HEADER.size
        pending: list[bytes] = []  # a record the reads so far cut off, in pieces (joined once it is whole)
        pending_size = needed = 0
        while not self.closed:
            self._transport.answered = False  # records flow both ways unprompted: always try the read
            try:
                data = recv(_RECV_SIZE)
            except OSError:
                return
            if not data:
                return
            if pending:
                pending.append(data)
                pending_size += len(data)
                if pending_size < needed:
                    continue
                data = b"".join(pending)
                pending.clear()
            pos = 0
            end = len(data)
            while end - pos >= size_of_header:
                size, kind, conn = unpack(data, pos)
                start = pos + size_of_header
                stop = start + size
                if stop > end:
                    break
                handle(kind, conn, data[start:stop])  # a slice of bytes: the payload's only copy
                pos = stop
            if pos < end:
                rest = data[pos:]
                pending.append(rest)
                pending_size = len(rest)
                needed = size_of_header + unpack(rest)[0] if pending_size >= size_of_header else size_of_header
            if after_read is not None:
                after_read()

    def shutdown(self) -> None:
        """End the link both ways: `run`, here and at the other end, returns."""
        self.closed = True
        self._transport.shutdown()

    def close(self) -> None:
        """Release the socket, once `run` returned."""
        self.closed = True
        self._transport.close()

    def _send_failed(self, err: Exception) -> None:
        self.closed = True
        self._transport.shutdown()
