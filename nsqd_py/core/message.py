"""Message: the unit a topic fans out and a channel hands to consumers, with its wire/disk encoding."""

from __future__ import annotations

import struct
from typing import Any, Final

from mypy_extensions import mypyc_attr

MSG_ID_LENGTH = 16
#: timestamp (8) + attempts (2) + id (16): the smallest valid encoded message.
MIN_VALID_MSG_LENGTH = 8 + 2 + MSG_ID_LENGTH

_HEADER = struct.Struct(">qH")
#: frame size, frame type (2 = message), timestamp, attempts: everything before the id.
_FRAME_HEADER = struct.Struct(">iiqH")
FRAME_TYPE_MESSAGE = 2

#: (id, body, timestamp, attempts, deferred, token). Timestamp and delay are typed Any on purpose: compiled,
#: an int or float slot is re-boxed into a new object for every tuple, while Any keeps the one object an MPUB's
#: messages share (56 bytes of RSS per queued message)
Parked = tuple[bytes, bytes, Any, int, Any, object]
#: positions in a Parked tuple (plain tuples, not NamedTuples: those are GC-tracked)
PARKED_ID: Final = 0
PARKED_BODY: Final = 1
PARKED_TIMESTAMP: Final = 2
PARKED_ATTEMPTS: Final = 3
PARKED_DELAY: Final = 4
PARKED_TOKEN: Final = 5


@mypyc_attr(acyclic=True)
class Message:
    """One message in one place: a topic queue, or a channel (each channel holds its own copy).

    Compiled, a Message is not tracked by the cyclic GC (one is made per delivery; tracking them made the
    collector ~20% of the consume path). That is safe because the one cycle it can be part of, through the
    client that holds it in flight (client -> channel -> in-flight table -> message -> client), is always
    broken explicitly: FIN, REQ, a timeout, emptying or closing the channel all drop the message or its client.

    The in-flight fields (client, deadline, deliver_ts) belong to the channel that holds the copy.
    ``deferred`` is the DPUB delay in seconds while the message waits in its topic's memory queue
    (like nsqd, the delay is lost once the message goes through a disk queue). ``token`` is the
    ack token of the disk-queue record this copy was read from; it is acked once the channel no
    longer needs the record.
    """

    __slots__ = (
        "attempts", "body", "client", "deadline", "deferred", "deliver_ts", "id", "timestamp", "token",
    )

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, attempts: int = 0) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.client: object | None = None
        self.deadline = 0.0
        self.deliver_ts = 0.0
        self.deferred = 0.0
        self.token: object | None = None

    def encode(self) -> bytes:
        """The disk-queue (and wire) encoding: timestamp, attempts, id, body."""
        return _HEADER.pack(self.timestamp, self.attempts) + self.id + self.body

    def frame(self) -> bytes:
        """A complete protocol V2 message frame, ready to write to a consumer."""
        header = _FRAME_HEADER.pack(30 + len(self.body), FRAME_TYPE_MESSAGE, self.timestamp, self.attempts)
        return header + self.id + self.body


def decode_record(data: bytes) -> Parked:
    """A disk-queue record as a parked message (no delay: like nsqd's, it is lost on disk); ValueError when the
    record is too short to be one."""
    if len(data) < MIN_VALID_MSG_LENGTH:
        raise ValueError(f"invalid size {len(data)}")
    timestamp, attempts = _HEADER.unpack_from(data)
    return (data[10:26], data[26:], timestamp, attempts, 0.0, None)
