"""Batch and streaming writes: every partition publishes from its executor over its own connection.

Rows go out in MPUB batches, up to ``mpub_window`` of them sent ahead of nsqd's `OK`s (the next MPUB is built while
nsqd stores the previous ones), and the task ends only when every one is answered. An error frame or a connection
broken twice raises, which fails the task, and Spark retries it. A retried task publishes its rows again, so a write
is at-least-once, like NSQ itself. Nothing published can be taken back, so `abort` only logs.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

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
from .connect import open_connection
from .discovery import all_nodes
from .options import OptionError, WriteOptions

log = logging.getLogger(__name__)

BODY_COLUMNS = ("value", "body")


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


@dataclass
class Published(WriterCommitMessage):
    """What one task published."""

    address: str
    messages: int


def _chunks(bodies: Iterable[bytes], max_messages: int, max_bytes: int) -> Iterator[list[bytes]]:
    """MPUB-sized groups: at most ``max_messages`` and (beyond a single message) ``max_bytes`` of payload."""
    chunk: list[bytes] = []
    size = 0
    for body in bodies:
        if chunk and (len(chunk) >= max_messages or size + len(body) + 4 > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(body)
        size += len(body) + 4
    if chunk:
        yield chunk


def _bodies(batches: Iterable[pa.RecordBatch], column: str) -> Iterator[bytes]:
    for batch in batches:
        for value in batch.column(column).to_pylist():
            if not value:
                raise ValueError(f"column {column!r} holds an empty or null value: NSQ messages cannot be empty")
            yield value.encode() if isinstance(value, str) else value


class _Publishing:
    """The write path both writers share."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.column = body_column(schema)

    def _address(self) -> str:
        """Partitions spread over the nsqd nodes by partition id."""
        nodes = sorted(self.opts.connect.nsqd_tcp_addresses or all_nodes(self.opts.connect.lookupd_http_addresses))
        if not nodes:
            raise ConnectionError(f"no nsqd registered with {', '.join(self.opts.connect.lookupd_http_addresses)}")
        context = TaskContext.get()
        return nodes[(context.partitionId() if context else 0) % len(nodes)]

    def publish(self, batches: Iterator[pa.RecordBatch]) -> Published:
        address = self._address()
        count = 0
        with _MPUBStream(address, self.opts) as stream:
            for chunk in _chunks(_bodies(batches, self.column), self.opts.mpub_max_messages, self.opts.mpub_max_bytes):
                stream.send(chunk)
                count += len(chunk)
            stream.flush()
        return Published(address, count)


class _MPUBStream:
    """MPUBs to one nsqd, up to ``mpub_window`` of them awaiting nsqd's answer.

    Computing the rows can take longer than nsqd waits for an idle client, so a connection found broken is replaced
    once, and the MPUBs it had not answered are sent again on the new one (they may have landed: at-least-once).
    """

    def __init__(self, address: str, opts: WriteOptions) -> None:
        self.address = address
        self.opts = opts
        self._conn: Connection | None = None
        self._unanswered: deque[bytes] = deque()
        self._replaced = False

    def __enter__(self) -> _MPUBStream:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            self._conn.close()

    def send(self, chunk: list[bytes]) -> None:
        raw = command("MPUB", self.opts.topic, body=mpub_body(chunk))
        self._unanswered.append(raw)
        self._on_connection(lambda conn: self._send(conn, raw))
        while len(self._unanswered) >= self.opts.mpub_window:
            self._on_connection(self._await_answer)

    def flush(self) -> None:
        """Wait until nsqd has answered every MPUB."""
        while self._unanswered:
            self._on_connection(self._await_answer)

    def _send(self, conn: Connection, raw: bytes) -> None:
        while self._unanswered and self._answer(conn, 0.0):
            pass  # answers (and heartbeats) that arrived meanwhile
        conn.send(raw)

    def _await_answer(self, conn: Connection) -> None:
        if not self._answer(conn, self.opts.connect.connect_timeout):
            conn.close()
            raise NSQConnectionError(f"timed out waiting for a response from {self.address}")

    def _answer(self, conn: Connection, timeout: float) -> bool:
        """Take one answer to the oldest MPUB; False if none came within ``timeout``. Heartbeats are answered."""
        frame = conn.read_frame(timeout)
        if frame is None:
            return False
        if isinstance(frame, ServerError):
            raise frame
        if not isinstance(frame, Response) or frame.data != OK:
            raise ProtocolError(f"unexpected answer to MPUB from {self.address}: {frame!r}")
        self._unanswered.popleft()
        return True

    def _on_connection(self, operation: Callable[[Connection], None]) -> None:
        if self._conn is None:
            self._conn = open_connection(self.address, self.opts.connect)
        try:
            operation(self._conn)
        except NSQConnectionError:
            self._conn.close()
            self._conn = None
            if self._replaced:
                raise
            self._replaced = True
            self._conn = open_connection(self.address, self.opts.connect)
            self._conn.send(b"".join(self._unanswered))


class NSQWriter(_Publishing, DataSourceArrowWriter):
    """`df.write.format("nsq")`."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return self.publish(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("published %d messages to %s", sum(m.messages for m in messages if isinstance(m, Published)),
                 self.opts.topic)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("write to %s failed after %d messages were published", self.opts.topic,
                    sum(m.messages for m in messages if isinstance(m, Published)))


class NSQStreamWriter(_Publishing, DataSourceStreamArrowWriter):
    """`df.writeStream.format("nsq")`: each micro-batch is published like a batch write."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return self.publish(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.debug("batch %d: published %d messages to %s", batchId,
                  sum(m.messages for m in messages if isinstance(m, Published)), self.opts.topic)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d to %s failed after %d messages were published (the retry publishes them again)",
                    batchId, self.opts.topic, sum(m.messages for m in messages if isinstance(m, Published)))
