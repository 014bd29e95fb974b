"""Batch and streaming writes: every partition publishes from its executor over its own connection.

Rows go out in MPUB batches and every MPUB's `OK` is awaited; an error frame or a broken connection raises, which
fails the task, and Spark retries it. A retried task publishes its rows again, so a write is at-least-once, like
NSQ itself. Nothing published can be taken back, so `abort` only logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
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
from ..client.errors import NSQConnectionError
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
        conn: Connection | None = None
        try:
            for chunk in _chunks(_bodies(batches, self.column), self.opts.mpub_max_messages, self.opts.mpub_max_bytes):
                conn = self._mpub(conn, address, chunk)
                count += len(chunk)
        finally:
            if conn is not None:
                conn.close()
        return Published(address, count)

    def _mpub(self, conn: Connection | None, address: str, chunk: list[bytes]) -> Connection:
        """MPUB and wait for OK. Computing the rows can take longer than nsqd waits for an idle client, so a
        connection found dead is replaced once (its last MPUB may have landed anyway: at-least-once)."""
        if conn is not None:
            try:
                while conn.read_frame(0) is not None:
                    pass  # heartbeats that came while the rows were computed (answered with NOP)
                conn.mpub(self.opts.topic, chunk)
                return conn
            except NSQConnectionError:
                conn.close()
        conn = open_connection(address, self.opts.connect)
        try:
            conn.mpub(self.opts.topic, chunk)
        except BaseException:
            conn.close()
            raise
        return conn


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
