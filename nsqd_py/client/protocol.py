"""Protocol V2 wire pieces: command encoding, frame types, and the decoded message."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ProtocolError

MAGIC_V2 = b"  V2"
FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2
HEARTBEAT = b"_heartbeat_"
OK = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"
#: timestamp (int64 ns), attempts (uint16), 16-byte id
MESSAGE_HEADER = 26

_SIZE = struct.Struct(">i")
#: a message frame's timestamp and attempts, before its id
MESSAGE_HEAD = struct.Struct(">qH")


def command(name: str, *params: str | bytes, body: bytes | None = None) -> bytes:
    """`NAME p1 p2\\n`, followed by `[int32 size][body]` when a body is given."""
    parts = [name.encode()]
    parts.extend(p if isinstance(p, bytes) else p.encode() for p in params)
    line = b" ".join(parts) + b"\n"
    if body is None:
        return line
    return line + _SIZE.pack(len(body)) + body


def id_commands(name: str, ids: Sequence[bytes], *params: str) -> bytes:
    """`NAME id p1 p2\\n` for every id, in one buffer: FIN, REQ or TOUCH for a whole batch of messages."""
    if not ids:
        return b""
    head = name.encode() + b" "
    tail = b"".join(b" " + p.encode() for p in params) + b"\n"
    return head + (tail + head).join(ids) + tail


def mpub_body(bodies: Iterable[bytes]) -> bytes:
    """MPUB's body: `[int32 count]([int32 size][bytes])*`."""
    items = list(bodies)
    return _SIZE.pack(len(items)) + b"".join(_SIZE.pack(len(b)) + b for b in items)


@dataclass(slots=True)
class Message:
    """A delivered message; `conn` is the connection it came on (FIN/REQ/TOUCH must go back there)."""

    id: bytes
    body: bytes
    timestamp: int
    attempts: int
    conn: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def decode(cls, data: bytes, conn: Any = None) -> Message:
        if len(data) < MESSAGE_HEADER:
            raise ProtocolError(f"message frame too short ({len(data)} bytes)")
        timestamp, attempts = MESSAGE_HEAD.unpack_from(data)
        return cls(data[10:26], data[26:], timestamp, attempts, conn)


@dataclass(frozen=True, slots=True)
class Response:
    """A response frame other than a heartbeat: `OK`, `CLOSE_WAIT` or JSON."""

    data: bytes
