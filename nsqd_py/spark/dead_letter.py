"""Dead letters: the envelope a message the source gives up on travels in, and getting it into nsqd.

A dead letter keeps what NSQ knew about the message, so that it can be inspected and replayed:

    b"NSQDL1"   uint16 big-endian: the header's length   the header: UTF-8 JSON   the body, as it was

The header holds `id` (nsqd's 16 hex digits), `attempts`, `timestamp` (publish time, ns since the epoch), `topic`,
`channel`, `nsqd` (the TCP address it was read from), `body_size` and `body_omitted`. `decode_dead_letter` reads it
back. Which messages become dead letters is trials.py's rule.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ..client.connection import Connection
from ..client.errors import ServerError
from ..client.protocol import Message
from .connect import open_connection
from .options import ConnectOptions

log = logging.getLogger(__name__)

MAGIC = b"NSQDL1"
_HEAD = struct.Struct(">6sH")
#: the most bytes of letters in one MPUB: a fifth of nsqd's default --max-body-size (5 MiB). nsqd does not
#: advertise its limits, so an MPUB it refuses as too big is split further
MPUB_BYTES = 1024 * 1024
#: an MPUB's body: the count, and each message's size
_MPUB_OVERHEAD, _MESSAGE_OVERHEAD = 4, 4


class DeadLetterError(RuntimeError):
    """Dead letters could not be published: the task fails, after handing back what it held."""


@dataclass(frozen=True)
class DeadLetter:
    """A dead-lettered message and what NSQ knew about it."""

    id: str
    attempts: int
    #: publish time, ns since the epoch (nsqd's clock)
    timestamp: int
    topic: str
    channel: str
    nsqd: str
    body: bytes
    #: the original body's size (also when the body was omitted)
    body_size: int
    #: the envelope with the body was too big for nsqd (its --max-msg-size): only the header was kept
    body_omitted: bool = False

    @classmethod
    def of(cls, msg: Message, topic: str, channel: str, nsqd: str) -> DeadLetter:
        return cls(msg.id.decode("ascii", "replace"), msg.attempts, msg.timestamp, topic, channel, nsqd, msg.body,
                   len(msg.body))

    def encode(self, omit_body: bool = False) -> bytes:
        letter = replace(self, body=b"", body_omitted=True) if omit_body else self
        header = json.dumps({"id": letter.id, "attempts": letter.attempts, "timestamp": letter.timestamp,
                             "topic": letter.topic, "channel": letter.channel, "nsqd": letter.nsqd,
                             "body_size": letter.body_size, "body_omitted": letter.body_omitted},
                            separators=(",", ":")).encode()
        return _HEAD.pack(MAGIC, len(header)) + header + letter.body


def decode_dead_letter(data: bytes) -> DeadLetter:
    """A message of a dead-letter topic, as the source published it; ValueError for anything else."""
    if len(data) < _HEAD.size or data[: len(MAGIC)] != MAGIC:
        raise ValueError("not a dead letter of the nsq source (no NSQDL1 header)")
    _, size = _HEAD.unpack_from(data)
    end = _HEAD.size + size
    header = json.loads(data[_HEAD.size : end])
    return DeadLetter(body=bytes(data[end:]), **header)


def _too_big(err: ServerError) -> bool:
    """nsqd's answer to an MPUB past its --max-body-size, or holding a message past its --max-msg-size."""
    return err.code in ("E_BAD_BODY", "E_BAD_MESSAGE") and "too big" in err.description


def _parts(letters: list[tuple[DeadLetter, bytes]], limit: int) -> Iterator[list[tuple[DeadLetter, bytes]]]:
    """Consecutive runs of letters whose MPUB body stays within ``limit`` bytes (one letter at least)."""
    part: list[tuple[DeadLetter, bytes]] = []
    size = _MPUB_OVERHEAD
    for item in letters:
        grown = size + _MESSAGE_OVERHEAD + len(item[1])
        if part and grown > limit:
            yield part
            part, grown = [], _MPUB_OVERHEAD + _MESSAGE_OVERHEAD + len(item[1])
        part.append(item)
        size = grown
    if part:
        yield part


class DeadLetterProducer:
    """Publishes dead letters to one nsqd in MPUBs it accepts: parts of at most `MPUB_BYTES`, halved while nsqd
    answers that one is too big (it closes the connection then: the next part opens another). A letter too big on
    its own is published without its body (its header says so) and logged."""

    def __init__(self, address: str, opts: ConnectOptions) -> None:
        self.address = address
        self.opts = opts
        self.conn: Connection | None = None

    def publish(self, topic: str, letters: list[DeadLetter]) -> Iterator[int]:
        """Publish ``letters`` in order; yields how many letters each MPUB nsqd took held (FIN those)."""
        encoded = [(letter, letter.encode()) for letter in letters]
        for part in _parts(encoded, MPUB_BYTES):
            yield from self._send(topic, part)

    def _send(self, topic: str, part: list[tuple[DeadLetter, bytes]]) -> Iterator[int]:
        try:
            self._mpub(topic, [data for _, data in part])
        except ServerError as err:
            if not _too_big(err):
                raise
            self.close()
            if len(part) > 1:
                yield from self._send(topic, part[: len(part) // 2])
                yield from self._send(topic, part[len(part) // 2 :])
                return
            self._omit_body(topic, part[0][0], err)
        yield len(part)

    def _omit_body(self, topic: str, letter: DeadLetter, err: ServerError) -> None:
        log.error("dead letter of message %s (topic %s, %d attempts, %d-byte body) is too big for nsqd %s (%s): "
                  "publishing it to %s without its body", letter.id, letter.topic, letter.attempts, letter.body_size,
                  self.address, err, topic)
        self._mpub(topic, [letter.encode(omit_body=True)])

    def _mpub(self, topic: str, bodies: list[bytes]) -> None:
        if self.conn is None:
            self.conn = open_connection(self.address, self.opts)
        self.conn.mpub(topic, bodies)

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()
