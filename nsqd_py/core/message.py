"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Message: the unit a topic fans out and a channel hands to consumers, with its wire/disk encoding."""

from __future__ import annotations

import struct
from typing import Any, Final

from mypy_extensions import mypyc_attr

MSG_ID_LENGTH: Final = 16
#: timestamp (8) + attempts (2) + id (16): the smallest valid encoded message.
MIN_VALID_MSG_LENGTH: Final = 8 + 2 + MSG_ID_LENGTH
#: a record's bytes before its body
RECORD_HEADER: Final = MIN_VALID_MSG_LENGTH

_HEADER: Final = struct.Struct(">qH")
_STAMP: Final = struct.Struct(">q")
_SIGN_BIT: Final = 1 << 63  # of the timestamp, a signed 64-bit number
_INT32_SIGN_BIT: Final = 1 << 31
_TWO_32: Final = 1 << 32
_ATTEMPTS: Final = struct.Struct(">H")
#: frame size and frame type (2 = message): a frame's first 8 bytes, before the record's fields.
_FRAME_PREFIX: Final = struct.Struct(">ii")
FRAME_TYPE_MESSAGE: Final = 2
#: the frame prefixes made so far, by body size (most topics carry a few sizes); at most _PREFIXES_KEPT of them
_prefixes: dict[int, bytes] = {}
_PREFIXES_KEPT: Final = 4096
#: the attempts field of the counts most messages have
_FEW_ATTEMPTS: Final = tuple(_ATTEMPTS.pack(count) for count in range(256))

#: A message waiting in a memory queue. Most are their record alone: one bytes object in the disk-queue encoding
#: (timestamp, attempts, id, body), which is also the tail of the wire frame and what a disk queue writes (272 bytes
#: of RSS per queued 200-byte message, where a tuple of the fields took 400). One that carries more - a DPUB's delay,
#: or the ack token of the disk record it was read from - is (record, delay in seconds, token). Neither is tracked by
#: the cyclic GC (see message_queue.py). Every channel of a topic shares the one object.
Parked = bytes | tuple[bytes, Any, object]


@mypyc_attr(acyclic=True)  # mypyc: not tracked by the cyclic GC (below; CONTRIBUTING.md, "Compiled modules")
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
        "attempts", "body", "client", "deadline", "deferred", "deliver_ts", "id", "stamp", "timestamp", "token",
    )

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, attempts: int = 0) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp
        #: the timestamp's 8 bytes as a record and a frame carry them (b"": not made yet)
        self.stamp = b""
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
        """A complete protocol V2 message frame, ready to write to a consumer: made of bytes it already has where
        it can (a struct pack per message was the larger part of this)."""
        body = self.body
        prefix = _prefixes.get(len(body))
        if prefix is None:
            prefix = _frame_prefix(len(body))
        attempts = self.attempts
        return b"".join((prefix, self.stamp or _STAMP.pack(self.timestamp),
                         _FEW_ATTEMPTS[attempts] if attempts < 256 else _ATTEMPTS.pack(attempts), self.id, body))


def _frame_prefix(body_size: int) -> bytes:
    prefix = _FRAME_PREFIX.pack(30 + body_size, FRAME_TYPE_MESSAGE)
    if len(_prefixes) < _PREFIXES_KEPT:
        _prefixes[body_size] = prefix
    return prefix


def int32_at(buf: bytes, at: int) -> int:
    """The big-endian signed 32-bit integer at ``at`` (the caller checked that 4 bytes are there): a frame's or a
    disk record's size. Indexed by hand: compiled, that costs a third of struct's unpack_from, which makes a tuple
    and a boxed int."""
    value = (buf[at] << 24) | (buf[at + 1] << 16) | (buf[at + 2] << 8) | buf[at + 3]
    return value - _TWO_32 if value >= _INT32_SIGN_BIT else value


def encode_record_header(timestamp: int, attempts: int) -> bytes:
    """A record's first 10 bytes; an MPUB's messages share one."""
    return _HEADER.pack(timestamp, attempts)


def decode_record(data: bytes) -> Parked:
    """A disk-queue record as a parked message (no delay: like nsqd's, it is lost on disk); ValueError when the
    record is too short to be one."""
    if len(data) < MIN_VALID_MSG_LENGTH:
        raise ValueError(f"invalid size {len(data)}")
    return data


def parked_body_size(parked: Parked) -> int:
    """The size of a parked message's body."""
    return (len(parked) if isinstance(parked, bytes) else len(parked[0])) - RECORD_HEADER


def parked_delay(parked: Parked) -> float:
    """The DPUB delay a parked message still waits for (0.0: none)."""
    return 0.0 if isinstance(parked, bytes) else parked[1]


def park(msg: Message) -> Parked:
    record = msg.encode()
    if msg.deferred or msg.token is not None:
        return (record, msg.deferred, msg.token)
    return record


def unpark(parked: Parked) -> Message:
    if isinstance(parked, bytes):
        record = parked
        delay: Any = 0.0
        token: object = None
    else:
        record, delay, token = parked
    # the fields by hand: compiled, indexing bytes costs less than unpack_from's call and tuple
    timestamp = record[0]
    for at in range(1, 8):
        timestamp = (timestamp << 8) | record[at]
    if timestamp >= _SIGN_BIT:
        timestamp -= _SIGN_BIT << 1
    msg = Message(record[10:26], record[26:], timestamp, (record[8] << 8) | record[9])
    msg.stamp = record[:8]
    msg.deferred = delay
    msg.token = token
    return msg


def parked_record(parked: Parked) -> tuple[bytes, object]:
    """What a disk queue writes of a parked message, and the ack token of the record it was read from."""
    if isinstance(parked, bytes):
        return parked, None
    return parked[0], parked[2]
