"""Batch and streaming writes: every partition publishes from its executor over its own connection.

Each row goes to the topic in its `topic` column, as in Kafka's sink, else to the `topic` option's. Rows go out in
MPUB batches, one topic's each, up to `mpubWindow` of them sent ahead of nsqd's `OK`s (the next MPUB is built while
nsqd stores the previous ones), and the task ends only when every one is answered. Nothing is sent twice unless it
provably did not land (`_MPUBStream`): an error frame, or an MPUB unanswered when its connection breaks or after
`requestTimeout`, fails the task, and Spark retries it. A retried task publishes its rows again, so a write is
at-least-once, like NSQ itself. Nothing published can be taken back, so `abort` only logs.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from ..client.connection import Connection
from ..client.errors import NSQConnectionError, ProtocolError, ServerError
from ..client.protocol import OK, Response, command, mpub_body
from ..wire.names import is_valid_name
from .connect import open_connection
from .discovery import all_nodes
from .options import OptionError, WriteOptions

log = logging.getLogger(__name__)

BODY_COLUMNS = ("value", "body")
TOPIC_COLUMN = "topic"


def body_column(schema: StructType) -> str:
    """The column published as the message body: `value`, else `body`, of type string or binary."""
    fields = {f.name.lower(): f for f in schema.fields}
    for name in BODY_COLUMNS:
        found = fields.get(name)
        if found is not None:
            if not isinstance(found.dataType, StringType | BinaryType):
                kind = found.dataType.simpleString()
                raise OptionError(f"column {found.name!r} must be string or binary, not {kind}")
            return found.name
    raise OptionError(f"format 'nsq' publishes a 'value' or 'body' column; the DataFrame has {schema.fieldNames()}")


def topic_column(schema: StructType, default: str | None) -> str | None:
    """The string column naming each row's topic (case-insensitive, as Kafka's); without one, ``default`` is needed."""
    found = next((f for f in schema.fields if f.name.lower() == TOPIC_COLUMN), None)
    if found is None:
        if default is None:
            raise OptionError(f"format 'nsq' needs a 'topic' option or a string 'topic' column; the DataFrame has "
                              f"{schema.fieldNames()}")
        return None
    if not isinstance(found.dataType, StringType):
        raise OptionError(f"column {found.name!r} names each row's topic and must be string, not "
                          f"{found.dataType.simpleString()}")
    return found.name


@dataclass
class Published(WriterCommitMessage):
    """What one task published: messages per topic."""

    address: str
    counts: dict[str, int]


def _summary(messages: list[WriterCommitMessage | None]) -> str:
    """The tasks' messages in all and per topic, for the log."""
    counts: Counter[str] = Counter()
    for message in messages:
        if isinstance(message, Published):
            counts.update(message.counts)
    per_topic = ", ".join(f"{n} to {topic}" for topic, n in sorted(counts.items()))
    return f"{counts.total()} messages ({per_topic})" if counts else "0 messages"


class _Router:
    """A row's topic: its column's value, else the default; each name is validated once, before anything is sent."""

    def __init__(self, default: str | None) -> None:
        self.default = default
        self._valid: set[str] = set()

    def __call__(self, topic: str | None) -> str:
        if topic is None:
            if self.default is None:
                raise ValueError("a row's 'topic' is null and no 'topic' option gives a default")
            return self.default
        if topic not in self._valid:
            if not is_valid_name(topic):
                raise ValueError(f"a row's topic {topic!r} is not a valid NSQ topic name "
                                 "(1-64 characters of [.a-zA-Z0-9_-], optionally ending in #ephemeral)")
            self._valid.add(topic)
        return topic


def _rows(batches: Iterable[pa.RecordBatch], body_col: str, topic_col: str | None,
          route: _Router) -> Iterator[tuple[str, bytes]]:
    """Each row's topic and body, in order."""
    for batch in batches:
        topics = batch.column(topic_col).to_pylist() if topic_col else repeat(None)
        for topic, value in zip(topics, batch.column(body_col).to_pylist(), strict=False):
            if not value:
                raise ValueError(f"column {body_col!r} holds an empty or null value: NSQ messages cannot be empty")
            yield route(topic), value.encode() if isinstance(value, str) else value


@dataclass
class _Chunk:
    """A topic's next MPUB and its payload size."""

    bodies: list[bytes] = field(default_factory=list)
    size: int = 0


def _chunks(rows: Iterable[tuple[str, bytes]], max_messages: int,
            max_bytes: int) -> Iterator[tuple[str, list[bytes]]]:
    """MPUB-sized groups per topic: at most ``max_messages`` and (beyond a single message) ``max_bytes`` of payload.

    Each topic fills its own chunk, which goes out when full, so rows of interleaved topics still travel in full MPUBs
    (and in order within a topic); the partial chunks go at the end.
    """
    pending: dict[str, _Chunk] = {}
    for topic, body in rows:
        chunk = pending.get(topic)
        if chunk is None:
            chunk = pending[topic] = _Chunk()
        elif len(chunk.bodies) >= max_messages or chunk.size + len(body) + 4 > max_bytes:
            yield topic, chunk.bodies
            chunk = pending[topic] = _Chunk()
        chunk.bodies.append(body)
        chunk.size += len(body) + 4
    for topic, chunk in pending.items():
        yield topic, chunk.bodies


class _Publishing:
    """The write path both writers share."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.column = body_column(schema)
        self.topic_column = topic_column(schema, opts.topic)

    def _address(self) -> str:
        """Partitions spread over the nsqd nodes by partition id."""
        nodes = sorted(self.opts.connect.nsqd_tcp_addresses or all_nodes(self.opts.connect.lookupd_http_addresses))
        if not nodes:
            raise ConnectionError(f"no nsqd registered with {', '.join(self.opts.connect.lookupd_http_addresses)}")
        context = TaskContext.get()
        return nodes[(context.partitionId() if context else 0) % len(nodes)]

    def publish(self, batches: Iterator[pa.RecordBatch]) -> Published:
        address = self._address()
        counts: Counter[str] = Counter()
        rows = _rows(batches, self.column, self.topic_column, _Router(self.opts.topic))
        with _MPUBStream(address, self.opts) as stream:
            for topic, chunk in _chunks(rows, self.opts.mpub_max_messages, self.opts.mpub_max_bytes):
                stream.send(topic, chunk)
                counts[topic] += len(chunk)
            stream.flush()
        return Published(address, dict(counts))


class PublishInDoubt(NSQConnectionError):
    """MPUBs were sent and not answered: nsqd may have stored them, so they are not sent again and the task fails."""


#: nsqd's default heartbeat interval (half its default --client-timeout of 60s); it closes a client that sent nothing
#: for two of them
DEFAULT_HEARTBEAT = 30.0


class _MPUBStream:
    """MPUBs to one nsqd (to any topics), up to `mpubWindow` of them awaiting nsqd's answer.

    Nothing is sent twice unless it provably did not land. nsqd answers each command before it reads the next one,
    so a connection that breaks with every MPUB answered holds nothing in doubt: it is replaced, as often as it
    happens (rows computed more slowly than nsqd's idle timeout, two heartbeat intervals, or nsqd restarted between
    two MPUBs), and one idle for a heartbeat interval is replaced before nsqd would close it. An MPUB whose bytes
    did not all leave (the write itself failed) cannot have been stored, and goes out again on a new connection.
    An MPUB sent and unanswered when the connection breaks, or for `requestTimeout`, may have been stored: it is
    not resent, and the task fails with `PublishInDoubt` naming how many messages are in doubt. Spark's retry of the
    task (spark.task.maxFailures) then publishes the task's rows again: that is the at-least-once window.
    """

    def __init__(self, address: str, opts: WriteOptions) -> None:
        self.address = address
        self.opts = opts
        self._conn: Connection | None = None
        #: the messages of each MPUB sent on ``_conn`` and not yet answered, oldest first
        self._unanswered: deque[int] = deque()
        self._last_sent = 0.0
        heartbeat = opts.connect.heartbeat_interval
        #: idle longer than this, a connection is replaced before the next MPUB (None: nsqd never closes it)
        self._idle_limit = (DEFAULT_HEARTBEAT if heartbeat is None else heartbeat / 1000 if heartbeat > 0 else None)

    def __enter__(self) -> _MPUBStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._drop()

    def send(self, topic: str, chunk: list[bytes]) -> None:
        raw = command("MPUB", topic, body=mpub_body(chunk))
        conn = self._ready()
        try:
            conn.send(raw)
        except NSQConnectionError as err:
            if self._unanswered:
                raise self._in_doubt(f"the connection broke ({err})") from err
            self._drop()  # not all of it left: nsqd cannot have stored it, and it has nothing else unanswered
            self._connect().send(raw)
        self._unanswered.append(len(chunk))
        self._last_sent = time.monotonic()
        while len(self._unanswered) >= self.opts.mpub_window:
            self._await_answer()

    def flush(self) -> None:
        """Wait until nsqd has answered every MPUB."""
        while self._unanswered:
            self._await_answer()

    def _ready(self) -> Connection:
        """The connection for the next MPUB: the answers (and heartbeats) that arrived meanwhile are taken, and one
        that broke or idled with nothing unanswered is replaced."""
        conn = self._conn
        if conn is None:
            return self._connect()
        try:
            while self._answer(conn, 0.0):
                pass
        except NSQConnectionError as err:
            if self._unanswered:
                raise self._in_doubt(f"the connection broke ({err})") from err
            self._drop()
            return self._connect()
        idle = time.monotonic() - self._last_sent
        if not self._unanswered and self._idle_limit is not None and idle >= self._idle_limit:
            self._drop()  # nsqd may be closing it right now, which would leave the next MPUB in doubt
            return self._connect()
        return conn

    def _await_answer(self) -> None:
        assert self._conn is not None
        try:
            answered = self._answer(self._conn, self.opts.request_timeout)
        except NSQConnectionError as err:
            raise self._in_doubt(f"the connection broke ({err})") from err
        if not answered:
            raise self._in_doubt(f"nsqd did not answer within requestTimeout ({self.opts.request_timeout:g}s)")

    def _answer(self, conn: Connection, timeout: float) -> bool:
        """Take one answer to the oldest MPUB; False if none came within ``timeout``. Heartbeats are answered."""
        frame = conn.read_frame(timeout)
        if frame is None:
            return False
        if isinstance(frame, ServerError):
            raise frame
        if not self._unanswered or not isinstance(frame, Response) or frame.data != OK:
            raise ProtocolError(f"unexpected answer to MPUB from {self.address}: {frame!r}")
        self._unanswered.popleft()
        return True

    def _in_doubt(self, why: str) -> PublishInDoubt:
        mpubs, messages = len(self._unanswered), sum(self._unanswered)
        self._drop()
        return PublishInDoubt(
            f"{mpubs} MPUB(s) of {messages} message(s) to nsqd {self.address} are unanswered: {why}. nsqd may have "
            f"stored them, so they are not sent again and the task fails; a retry of the task publishes its rows "
            f"again (at-least-once). If nsqd is slow rather than gone, raise 'requestTimeout'")

    def _connect(self) -> Connection:
        self._conn = open_connection(self.address, self.opts.connect)
        self._unanswered.clear()
        self._last_sent = time.monotonic()
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class NSQWriter(_Publishing, DataSourceArrowWriter):
    """`df.write.format("nsq")`."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return self.publish(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("published %s", _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("write failed after %s were published", _summary(messages))


class NSQStreamWriter(_Publishing, DataSourceStreamArrowWriter):
    """`df.writeStream.format("nsq")`: each micro-batch is published like a batch write."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return self.publish(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.debug("batch %d: published %s", batchId, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d failed after %s were published (the retry publishes them again)", batchId,
                    _summary(messages))
