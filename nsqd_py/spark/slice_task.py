"""One executor task of a micro-batch: read a slice from the write-ahead location, or from nsqd and publish it.

The task walks its slice chunk by chunk. A chunk some attempt already published is read from the location. Otherwise
the task takes up to one chunk of messages from its nsqd (at most nsqd's max RDY, so one connection holds them all),
publishes them as that chunk, and only then FINs them; an attempt that loses the race for a chunk number hands its
messages back (REQ) and reads the winner's chunk instead. When the quota is reached, nsqd had nothing more for
`pollTimeout`, or nsqd cannot be reached, the task publishes the slice's end. So every attempt of a partition, now or
after a driver restart, yields the same rows, and no message is FINed before a published chunk holds it.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..client.connection import Connection
from ..client.errors import NSQConnectionError, NSQError, ServerError
from ..client.protocol import Message, command, id_commands
from .connect import open_connection
from .options import ReadOptions
from .schema import ARROW_SCHEMA, message_table
from .slices import SliceStore

log = logging.getLogger(__name__)


class BatchClosedError(RuntimeError):
    """This attempt outlived its batch: Spark committed the batch with another attempt's rows."""

_DEFAULT_MAX_RDY = 2500
#: a chunk stops growing past this many body bytes (it is built in the task's memory)
_CHUNK_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class SlicePlan:
    """What the driver planned for one partition: whose messages, how many, where the slice goes."""

    location: str
    query: str
    batch: int
    topic: str
    nsqd: str
    index: int
    quota: int
    #: body bytes, or 0 for no limit
    byte_quota: int = 0
    #: the channel the batch was planned on (a replay reads it even if the option changed since)
    channel: str = ""


class _Subscription:
    """The task's connection to its nsqd: messages come in RDY-sized steps, and what the task does not use (beyond
    its quota, or published after an availableNow cutoff) goes back with REQ when it ends."""

    def __init__(self, plan: SlicePlan, opts: ReadOptions, cutoff_ns: int | None) -> None:
        self.plan = plan
        self.opts = opts
        self.cutoff_ns = cutoff_ns
        self.conn: Connection | None = None
        self.max_rdy = _DEFAULT_MAX_RDY
        #: delivered, not handed out yet
        self.pending: deque[Message] = deque()
        #: published after the cutoff: never handed out
        self.held: list[Message] = []

    def open(self) -> None:
        conn = open_connection(self.plan.nsqd, self.opts.connect)
        try:
            conn.sub(self.plan.topic, self.plan.channel or self.opts.channel)
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        self.max_rdy = max(1, int(conn.negotiated.get("max_rdy_count", _DEFAULT_MAX_RDY)))

    def take(self, limit: int, max_bytes: int) -> tuple[list[Message], bool]:
        """Up to ``limit`` messages (or ``max_bytes`` of bodies) and whether nsqd went quiet for pollTimeout first."""
        if self.conn is None:
            self.open()
        assert self.conn is not None
        limit = min(limit, self.max_rdy - len(self.held))  # nsqd sends no more than RDY unsettled messages
        if limit <= 0:
            return [], True
        self.conn.send(command("RDY", str(limit + len(self.held))))
        taken: list[Message] = []
        size = 0
        while len(taken) < limit and size < max_bytes:
            if not self.pending:
                self._receive(self.conn)
                if not self.pending:
                    return taken, True
            msg = self.pending.popleft()
            if self.cutoff_ns is not None and msg.timestamp > self.cutoff_ns:
                self.held.append(msg)
                continue
            taken.append(msg)
            size += len(msg.body)
        return taken, False

    def _receive(self, conn: Connection) -> None:
        frame = conn.read_frame(self.opts.poll_timeout)
        frames = [] if frame is None else [frame, *conn.read_frames()]
        for item in frames:
            if isinstance(item, Message):
                self.pending.append(item)
            elif isinstance(item, ServerError):
                log.log(logging.ERROR if item.fatal else logging.DEBUG, "nsqd %s: %s", self.plan.nsqd, item)

    def settle(self, finished: list[Message], next_limit: int) -> None:
        """FIN what a published chunk holds, first lowering RDY to what the next chunk may take."""
        if self.conn is None:
            return
        rdy = min(self.max_rdy, next_limit + len(self.held))
        try:
            self.conn.send(command("RDY", str(rdy)) + id_commands("FIN", [m.id for m in finished]))
        except NSQConnectionError as err:  # published but not FINed: nsqd delivers them again after msg_timeout
            log.warning("could not FIN %d published messages on %s: %s", len(finished), self.plan.nsqd, err)
            self.close()

    def requeue(self, messages: list[Message]) -> None:
        """Hand back a chunk this attempt could not publish (RDY 0 first: the next chunk may come from storage)."""
        if self.conn is not None and messages:
            try:
                self.conn.send(command("RDY", "0") + id_commands("REQ", [m.id for m in messages], "0"))
            except NSQConnectionError:  # nsqd requeues them after msg_timeout
                self.close()

    def dead_letter(self, messages: list[Message]) -> None:
        """Publish to the dead-letter topic, then FIN: a message over maxAttempts stops failing batches."""
        topic = self.opts.dead_letter_for(self.plan.topic)
        with open_connection(self.plan.nsqd, self.opts.connect) as producer:
            producer.mpub(topic, [m.body for m in messages])
        log.warning("%d messages of %s delivered more than %d times: moved to %s", len(messages), self.plan.topic,
                    self.opts.max_attempts, topic)
        assert self.conn is not None
        self.conn.send(id_commands("FIN", [m.id for m in messages]))

    def close(self) -> None:
        """Hand back what was delivered and not published, and disconnect."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        unused, self.held = [*self.pending, *self.held], []
        self.pending.clear()
        with contextlib.suppress(NSQConnectionError):  # else nsqd requeues them after msg_timeout
            conn.send(command("RDY", "0") + id_commands("REQ", [m.id for m in unused], "0"))
        conn.close()


def _body_bytes(table: pa.Table) -> int:
    return int(pc.sum(pc.binary_length(table.column("body"))).as_py() or 0)


class SliceTask:
    """`read` for one partition (see the module docstring)."""

    def __init__(self, plan: SlicePlan, opts: ReadOptions, cutoff_ns: int | None) -> None:
        self.plan = plan
        self.opts = opts
        self.store = SliceStore(plan.location, plan.query)
        self.slice = self.store.slice(plan.batch, plan.topic, plan.nsqd, plan.index)
        self.subscription = _Subscription(plan, opts, cutoff_ns)
        #: nothing more from nsqd: the quota was reached, it went quiet, or it cannot be reached
        self.done_reading = False
        self.rows = 0
        self.bytes = 0

    def run(self) -> Iterator[pa.RecordBatch]:
        self.store.check_planned(self.plan.batch)
        number = 0
        try:
            while True:
                table = self.slice.read(number)
                if table is None:
                    table = self._next_chunk(number)
                if table.num_rows == 0:
                    return
                self.rows += table.num_rows
                self.bytes += _body_bytes(table)
                yield from table.to_batches()
                number += 1
        finally:
            self.subscription.close()

    def _remaining(self) -> tuple[int, int]:
        rows = self.plan.quota - self.rows
        byte_quota = self.plan.byte_quota or (1 << 62)
        return rows, byte_quota - self.bytes

    def _next_chunk(self, number: int) -> pa.Table:
        """Chunk ``number`` as published: this attempt's messages, or the end, or whatever another attempt won."""
        rows, size = self._remaining()
        messages: list[Message] = []
        if not self.done_reading and rows > 0 and size > 0:
            messages = self._take(rows, min(size, _CHUNK_BYTES))
        if not messages:
            self.slice.finish(number, ARROW_SCHEMA, self.rows)
            self._check_open([])
            return self._published(number)
        table = message_table(messages, self.plan.topic, self.plan.channel or self.opts.channel,
                              [self.plan.nsqd] * len(messages))
        won = self.slice.publish(number, table)
        self._check_open(messages)
        if not won:
            log.info("slice %s chunk %d was published by another attempt: handing back %d messages",
                     self.slice.directory, number, len(messages))
            self.subscription.requeue(messages)
            return self._published(number)
        rows_after = rows - len(messages)
        self.subscription.settle(messages, 0 if self.done_reading else min(rows_after, self.subscription.max_rdy))
        return table

    def _check_open(self, held: list[Message]) -> None:
        """An attempt still running after its batch was committed (a speculative copy, an executor Spark gave up on)
        must not FIN: no committed batch would hold those rows. It hands them back and stops."""
        if self.store.is_open(self.plan.batch):
            return
        self.subscription.requeue(held)
        raise BatchClosedError(f"batch {self.plan.batch} was committed or removed while this attempt of slice "
                               f"{self.slice.directory} ran: handed back {len(held)} messages")

    def _published(self, number: int) -> pa.Table:
        table = self.slice.read(number)
        if table is None:  # published a moment ago: only a deletion from outside removes it
            raise FileNotFoundError(f"chunk {number} of {self.slice.directory} vanished from the write-ahead location")
        return table

    def _take(self, limit: int, max_bytes: int) -> list[Message]:
        """One chunk's messages from nsqd; marks the slice done when nsqd is quiet or unreachable."""
        try:
            messages, quiet = self.subscription.take(limit, max_bytes)
        except (NSQError, OSError) as err:
            return self._unreachable(err)
        self.done_reading = quiet or len(messages) >= self._remaining()[0]
        if not self.opts.max_attempts:
            return messages
        dead = [m for m in messages if m.attempts > self.opts.max_attempts]
        if dead:
            self.subscription.dead_letter(dead)
        return [m for m in messages if m.attempts <= self.opts.max_attempts]

    def _unreachable(self, err: Exception) -> list[Message]:
        """nsqd went away mid-slice: what it delivered unpublished comes back after msg_timeout. The slice ends here
        unless failOnUnreachable asks to fail the task."""
        self.subscription.close()
        if self.opts.fail_on_unreachable:
            raise NSQConnectionError(f"nsqd {self.plan.nsqd} cannot be reached (failOnUnreachable): {err}") from err
        log.warning("nsqd %s cannot be reached; slice %s ends with %d rows: %s", self.plan.nsqd,
                    self.slice.directory, self.rows, err)
        self.done_reading = True
        return []

