"""One executor task of a micro-batch: read a slice from the write-ahead location, or from nsqd and publish it.

The task walks its slice chunk by chunk. A chunk some attempt already published is read from the location. Otherwise
the task takes up to one chunk of messages from its nsqd (at most nsqd's max RDY, so one connection holds them all),
publishes them as that chunk, and only then FINs them; an attempt that loses the race for a chunk number hands its
messages back (REQ) and reads the winner's chunk instead. When the quota is reached, nsqd had nothing more for
`pollTimeout`, or nsqd cannot be reached, the task publishes the slice's end. So every attempt of a partition, now or
after a driver restart, yields the same rows, and no message is FINed before a published chunk holds it.

While the task's rows go downstream, a keeper thread TOUCHes what it holds (`Subscription`), so a slow stage does
not make nsqd deliver those messages again. With maxAttempts, messages delivered that often are tried apart, and
only those a task died holding alone are dead-lettered (trials.py, dead_letter.py).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import pyarrow as pa

from ..client.connection import Connection, Frame
from ..client.errors import NSQConnectionError, NSQError, ServerError
from ..client.protocol import CLOSE_WAIT, Message, Response, command, id_commands
from .chunks import end_chunks, end_counts
from .connect import as_config_error, open_connection
from .dead_letter import DeadLetter, DeadLetterError, DeadLetterProducer
from .options import ReadOptions
from .schema import ARROW_SCHEMA, message_table
from .slices import DataLossError, SliceSpec, SliceStore
from .trials import Trial, Trials, explained

log = logging.getLogger(__name__)


class BatchClosedError(RuntimeError):
    """This attempt outlived its batch: Spark committed the batch with another attempt's rows."""


class UnsettledChunkError(OSError):
    """A publish failed, and whether a durable chunk holds its messages cannot be told: they were handed back."""


_T = TypeVar("_T")
#: the pauses between questions to a write-ahead location that fails after a publish that may have stored its offer
#: (about half a minute in all: S3 throttling, a NameNode failover), while the keeper TOUCHes the messages in hand
_SETTLE_PAUSES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0)

_DEFAULT_MAX_RDY = 2500
#: nsqd's defaults, for an nsqd whose IDENTIFY answer leaves them out
_DEFAULT_MSG_TIMEOUT_MS = 60_000
_DEFAULT_MAX_MSG_TIMEOUT_MS = 15 * 60_000
_DEFAULT_HEARTBEAT_S = 30.0
#: a chunk stops growing past this many body bytes (it is built in the task's memory)
_CHUNK_BYTES = 64 * 1024 * 1024
#: the body size a task assumes before it has seen one: nsqd's default --max-msg-size
_ASSUMED_BODY = 1024 * 1024
#: the largest body seen fades by this factor with every message after it, so one large body does not shrink RDY
#: for the rest of the task
_BODY_FADE = 0.99


@dataclass(frozen=True)
class SliceAssignment:
    """One partition as a task gets it: its slice, and the batch the slice belongs to (from the batch's offset)."""

    #: the write-ahead location and the query's directory in it
    location: str
    query: str
    batch: int
    #: the channel the batch was planned on (a replay reads it even if the option changed since)
    channel: str
    spec: SliceSpec


class Subscription:
    """The task's connection to its nsqd: messages come in RDY-sized steps, and what the task does not use (beyond
    its quota, or published after an availableNow cutoff) goes back with REQ when it ends.

    Between its steps the task is elsewhere: its rows go downstream (a UDF, a sink, an S3 write may take minutes)
    or a chunk is being written. Meanwhile a keeper thread reads what nsqd sends (answering heartbeats) and TOUCHes
    every message the task holds (the chunk in hand, the next one nsqd already sent, availableNow's later ones),
    so none reaches msg_timeout. TOUCH cannot extend a message past nsqd's --max-msg-timeout: the keeper hands
    back (REQ) a message not in hand before it gets there, and a chunk stops growing at half of it.

    RDY bounds what nsqd sends ahead by count (the quota, nsqd's max RDY) and by bytes, as Kafka's fetch.max.bytes
    does: the bodies the task holds unsettled stay within `fetchMaxBytes` plus one message, estimating the bodies to
    come by the largest recent one (nsqd's default max size, 1 MiB, before the first). Messages held past the
    cutoff keep their id only.
    """

    def __init__(self, plan: SliceAssignment, opts: ReadOptions, cutoff_ns: int | None) -> None:
        self.plan = plan
        self.opts = opts
        self.cutoff_ns = cutoff_ns
        self.conn: Connection | None = None
        self.max_rdy = _DEFAULT_MAX_RDY
        #: delivered, not handed out yet
        self.pending: deque[Message] = deque()
        #: published after the cutoff: never handed out
        self.held: list[Message] = []
        #: handed out by `take`, not settled yet
        self.in_hand: list[Message] = []
        #: the suspects in hand are being tried (trials.py)
        self.trial: Trial | None = None
        self.handed_back = self.dead_lettered = self.fin_failed = self.finished = 0
        #: guards `pending`, `held` and `in_hand` against the keeper
        self._lock = threading.Lock()
        #: held by whoever reads the socket: the task while it waits for messages, else the keeper
        self._read_lock = threading.Lock()
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None
        #: seconds between the keeper's rounds, and the most a message not in hand is held
        self._interval = self._max_hold = 0.0
        #: when the keeper first saw each message not in hand
        self._seen: dict[bytes, float] = {}
        #: the RDY last sent, and the largest recent body (fading, None before the first)
        self._rdy = 0
        self._body_estimate: float | None = None

    def open(self) -> None:
        if self.opts.max_attempts:
            self.opts.dead_letter_for(self.plan.spec.topic)  # a topic found by subscribePattern: fail before reading
        conn = open_connection(self.plan.spec.nsqd, self.opts.connect)
        try:
            conn.sub(self.plan.spec.topic, self.plan.channel)
        except BaseException as err:
            conn.close()
            refusal = as_config_error(err, self.plan.spec.nsqd)
            if refusal is None or refusal is err:
                raise
            raise refusal from err
        self.conn = conn
        self.max_rdy = max(1, int(conn.negotiated.get("max_rdy_count", _DEFAULT_MAX_RDY)))
        self._start_keeper(conn.negotiated)

    def take(self, limit: int, max_bytes: int) -> tuple[list[Message], bool]:
        """Up to ``limit`` messages (or ``max_bytes`` of bodies) and whether nsqd went quiet for pollTimeout first."""
        if self.conn is None:
            self.open()
        conn = self.conn
        assert conn is not None
        limit = min(limit, self.max_rdy - len(self.held))  # nsqd sends no more than RDY unsettled messages
        if limit <= 0:
            return [], True
        taken: list[Message] = []
        with self._lock:  # the keeper sends TOUCH on the same socket
            self.in_hand = taken
            self._send_rdy(conn, self._window(limit))
        size = 0
        stop_at = time.monotonic() + self._max_hold / 2
        while len(taken) < limit and size < max_bytes and time.monotonic() < stop_at:
            if not self.pending and len(taken) + len(self.held) >= self._rdy:
                with self._lock:  # all that RDY allows came: more only as the bytes allow
                    window = self._window(limit)
                    if window <= self._rdy:
                        return taken, False  # fetchMaxBytes is reached: this chunk ends here
                    self._send_rdy(conn, window)
            if not self.pending:
                self._receive(conn)
            with self._lock:
                if not self.pending:
                    return taken, True
                size = self._hand_out(taken, limit, max_bytes, size)
        return taken, False

    def _window(self, limit: int) -> int:
        """The RDY for ``limit`` messages in hand and pending (beyond those held past the cutoff): within nsqd's max
        RDY, and within `fetchMaxBytes` of bodies with what is unsettled now, at least one more message when the
        task holds no body (lock held)."""
        holding = [*self.pending, *self.in_hand]
        room = self.opts.fetch_max_bytes - sum(len(m.body) for m in holding)
        more = max(0, int(room // max(1.0, self._body_estimate or _ASSUMED_BODY)))
        if not holding:
            more = max(more, 1)  # a body larger than fetchMaxBytes comes alone, as Kafka's first record batch
        return min(self.max_rdy, limit + len(self.held), len(holding) + len(self.held) + more)

    def _send_rdy(self, conn: Connection, rdy: int, then: bytes = b"") -> None:
        conn.send(command("RDY", str(rdy)) + then)
        self._rdy = rdy

    def _hand_out(self, taken: list[Message], limit: int, max_bytes: int, size: int) -> int:
        """Move pending messages into ``taken`` (or `held`, past the cutoff, without its body) up to the limits;
        the new size."""
        while self.pending and len(taken) < limit and size < max_bytes:
            msg = self.pending.popleft()
            if self.cutoff_ns is not None and msg.timestamp > self.cutoff_ns:
                self.held.append(replace(msg, body=b""))  # never handed out: only its id is needed
                continue
            taken.append(msg)
            size += len(msg.body)
        return size

    def _receive(self, conn: Connection) -> None:
        """Wait up to pollTimeout for a message. The wait holds the socket's reads only, never the lock the keeper
        needs to TOUCH the messages in hand: with pollTimeout at or above msg_timeout they would time out meanwhile
        and come again. Frames that are not messages (an E_FIN_FAILED) do not end the wait."""
        deadline = time.monotonic() + self.opts.poll_timeout
        with self._read_lock:
            while not self.pending:
                frame = conn.read_frame(max(0.0, deadline - time.monotonic()))
                if frame is None:
                    return
                frames = [frame, *conn.read_frames()]
                with self._lock:
                    self._absorb(frames)

    def _absorb(self, frames: list[Frame]) -> None:
        for item in frames:
            if isinstance(item, Message):
                self.pending.append(item)
                size, estimate = len(item.body), self._body_estimate
                self._body_estimate = size if estimate is None else max(size, estimate * _BODY_FADE)
            elif isinstance(item, ServerError):
                self._note(item)

    def _note(self, err: ServerError) -> None:
        """An error frame: E_FIN_FAILED means nsqd had taken the message back (timed out, handed to another
        consumer) although a published chunk holds it, so it comes again: counted, and reported at the end."""
        if err.code == "E_FIN_FAILED":
            self.fin_failed += 1
        log.log(logging.ERROR if err.fatal else logging.DEBUG, "nsqd %s: %s", self.plan.spec.nsqd, err)

    def put_back(self, messages: list[Message]) -> None:
        """Return messages in hand to the front of `pending`: the next take hands them out first."""
        ids = {m.id for m in messages}
        with self._lock:
            self.in_hand = [m for m in self.in_hand if m.id not in ids]
            self.pending.extendleft(reversed(messages))

    def settle(self, finished: list[Message], next_limit: int) -> None:
        """FIN what a published chunk holds, first setting RDY to what the next chunk may take: nsqd sends the next
        chunk while these rows go downstream, and the keeper TOUCHes it meanwhile."""
        self._release(finished)
        if self.conn is None:
            return
        try:
            with self._lock:
                self._send_rdy(self.conn, self._window(next_limit), id_commands("FIN", [m.id for m in finished]))
            self.finished += len(finished)
        except NSQConnectionError as err:  # published but not FINed: nsqd delivers them again after msg_timeout
            log.warning("could not FIN %d published messages on %s: %s", len(finished), self.plan.spec.nsqd, err)
            self.close()

    def requeue(self, messages: list[Message]) -> None:
        """Hand back a chunk this attempt could not publish (RDY 0 first: the next chunk may come from storage)."""
        self._release(messages)
        if self.conn is not None and messages:
            try:
                with self._lock:  # the keeper sends and counts too
                    self._send_rdy(self.conn, 0, id_commands("REQ", [m.id for m in messages], "0"))
                    self.handed_back += len(messages)
            except NSQConnectionError:  # nsqd requeues them after msg_timeout
                self.close()

    def _release(self, messages: list[Message]) -> None:
        """``messages`` leave the task's hands (FIN or REQ follows): the keeper stops TOUCHing them, and a trial
        of them ended with the task alive."""
        ids = {m.id for m in messages}
        with self._lock:
            self.in_hand = [m for m in self.in_hand if m.id not in ids]
        self._end_trial()

    def _end_trial(self) -> None:
        trial, self.trial = self.trial, None
        if trial is None:
            return
        try:
            trial.end()
        except OSError as err:  # the write-ahead location fails: the trial stays, as if the task had died
            log.warning("could not remove trial %s from the write-ahead location: %s", trial.path, err)

    def dead_letter(self, messages: list[Message]) -> None:
        """Publish ``messages`` to the dead-letter topic, each in its envelope (dead_letter.py), FINing those of
        each MPUB nsqd took. If that fails the task fails: everything it holds goes back (with the trials that
        condemned them), and the next delivery tries again."""
        spec = self.plan.spec
        topic = self.opts.dead_letter_for(spec.topic)
        letters = [DeadLetter.of(m, spec.topic, self.plan.channel, spec.nsqd) for m in messages]
        producer = DeadLetterProducer(spec.nsqd, self.opts.connect)  # one per call: idle, it misses heartbeats
        done = 0
        try:
            for count in producer.publish(topic, letters):
                self._fin_dead(messages[done : done + count])
                done += count
        except (NSQError, OSError) as err:
            self.put_back(self.in_hand)
            raise DeadLetterError(
                f"could not publish {len(messages) - done} messages of topic {spec.topic} to the dead-letter "
                f"topic {topic} on nsqd {spec.nsqd}: {err}; the task hands back the "
                f"{len(self.pending) + len(self.held)} messages it holds (the dead letters among them go out when "
                f"nsqd delivers them again)") from err
        finally:
            producer.close()
        log.warning("%d messages of %s on %s failed two trials, one alone (tasks died holding them): moved to %s",
                    len(messages), spec.topic, spec.nsqd, topic)

    def _fin_dead(self, messages: list[Message]) -> None:
        ids = {m.id for m in messages}
        assert self.conn is not None
        with self._lock:
            self.in_hand = [m for m in self.in_hand if m.id not in ids]
            self.conn.send(id_commands("FIN", list(ids)))
        self.dead_lettered += len(messages)
        self.finished += len(messages)

    # -- the keeper -------------------------------------------------------------------------------------------

    def _start_keeper(self, negotiated: dict[str, Any]) -> None:
        """Rounds often enough that a message is TOUCHed well within msg_timeout and a heartbeat is answered within
        nsqd's two heartbeat intervals (a task waiting for messages holds the lock only to store what it read)."""
        msg_timeout = negotiated.get("msg_timeout", _DEFAULT_MSG_TIMEOUT_MS) / 1000
        heartbeat = self.opts.connect.heartbeat_interval
        heartbeat_s = _DEFAULT_HEARTBEAT_S if heartbeat is None else heartbeat / 1000 if heartbeat > 0 else math.inf
        self._interval = min(msg_timeout / 3, heartbeat_s / 2)
        max_msg_timeout = negotiated.get("max_msg_timeout", _DEFAULT_MAX_MSG_TIMEOUT_MS) / 1000
        self._max_hold = max(self._interval, max_msg_timeout - 3 * self._interval)
        self._stop.clear()
        self._keeper = threading.Thread(target=self._keep, name=f"nsq-keeper {self.plan.spec.nsqd}", daemon=True)
        self._keeper.start()

    def _keep(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                conn = self.conn
                if conn is None:
                    return
                try:
                    self._keep_round(conn)
                except (NSQError, OSError) as err:  # the task finds the connection broken at its next step
                    log.debug("keeper of %s stops: %s", self.plan.spec.nsqd, err)
                    return

    def _keep_round(self, conn: Connection) -> None:
        if self._read_lock.acquire(blocking=False):  # else the task is reading, and answers heartbeats itself
            try:
                while frames := conn.read_frames():
                    self._absorb(frames)
            finally:
                self._read_lock.release()
        self._hand_back_old(conn)
        held = [m.id for m in (*self.in_hand, *self.pending, *self.held)]
        if held:
            conn.send(id_commands("TOUCH", held))

    def _hand_back_old(self, conn: Connection) -> None:
        """REQ the messages not in hand that nsqd would soon time out whatever the TOUCHes (--max-msg-timeout)."""
        now = time.monotonic()
        self._seen = {m.id: self._seen.get(m.id, now) for m in (*self.pending, *self.held)}
        old = {msg_id for msg_id, seen in self._seen.items() if now - seen >= self._max_hold}
        if not old:
            return
        self.pending = deque(m for m in self.pending if m.id not in old)
        self.held = [m for m in self.held if m.id not in old]
        conn.send(id_commands("REQ", list(old), "0"))
        self.handed_back += len(old)

    def _stop_keeper(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            self._stop.set()
            keeper.join()

    # -- the end ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Hand back what was delivered and not published, and disconnect; the FINs nsqd refused are counted until
        it confirms the close (CLS), and reported."""
        self._stop_keeper()
        self._end_trial()
        conn, self.conn = self.conn, None
        if conn is None:
            return
        unused, self.held = [*self.pending, *self.held], []
        self.pending.clear()
        with contextlib.suppress(NSQError, OSError):  # else nsqd requeues them after msg_timeout
            conn.send(command("RDY", "0") + id_commands("REQ", [m.id for m in unused], "0") + command("CLS"))
            self.handed_back += len(unused)
            self._drain(conn)
        conn.close()
        if self.fin_failed:
            log.warning("%d FIN of %d sent to nsqd %s (topic %s, batch %d, slice %d) failed: nsqd had taken those "
                        "messages back, so it delivers them again although a published chunk holds them",
                        self.fin_failed, self.finished, self.plan.spec.nsqd, self.plan.spec.topic, self.plan.batch,
                        self.plan.spec.index)

    def _drain(self, conn: Connection) -> None:
        """Read until nsqd's CLOSE_WAIT: error frames for the last FINs, and REQ what was still on its way."""
        deadline = time.monotonic() + self.opts.connect.connect_timeout
        while (frame := conn.read_frame(max(0.0, deadline - time.monotonic()))) is not None:
            if isinstance(frame, Response) and frame.data == CLOSE_WAIT:
                return
            if isinstance(frame, Message):
                conn.send(id_commands("REQ", [frame.id], "0"))
                self.handed_back += 1
            elif isinstance(frame, ServerError):
                self._note(frame)


def _body_bytes(table: pa.Table) -> int:
    import pyarrow.compute as pc  # here: its 0.09 s import would be paid by the driver's Python process per query

    return int(pc.sum(pc.binary_length(table.column("body"))).as_py() or 0)


class SliceTask:
    """`read` for one partition (see the module docstring)."""

    def __init__(self, plan: SliceAssignment, opts: ReadOptions, cutoff_ns: int | None) -> None:
        self.plan = plan
        self.opts = opts
        self.store = SliceStore(plan.location, plan.query)
        self.slice = self.store.slice(plan.batch, plan.spec.name)
        self.subscription = Subscription(plan, opts, cutoff_ns)
        #: nothing more from nsqd: the quota was reached, it went quiet, or it cannot be reached
        self.done_reading = False
        self.rows = 0
        self.bytes = 0
        #: chunks this attempt published from nsqd, and chunks it read from the write-ahead location
        self.fresh_chunks = self.replayed_chunks = 0
        #: 1 when this attempt's nsqd could not be reached (its slice ended early)
        self.unreachable = 0

    def run(self) -> Iterator[pa.RecordBatch]:
        self.store.check_planned(self.plan.batch)
        number = 0
        # chunks are won in order: every number below the last one the slice has now must be there to read
        numbers = self.slice.numbers()
        last = numbers[-1] if numbers else -1
        lost = False
        try:
            while True:
                table = self.slice.read(number)
                if table is None:
                    if number < last:
                        lost = True
                        self._data_lost(f"chunk {number} is gone while chunk {last} is there", f"chunk {number}")
                    table = self._next_chunk(number)
                elif table.num_rows:
                    self.replayed_chunks += 1
                if table.num_rows == 0:
                    if not lost:
                        self._check_end(number, table)
                    return
                self.rows += table.num_rows
                self.bytes += _body_bytes(table)
                yield from table.to_batches()
                number += 1
        finally:
            self.subscription.close()

    def _check_end(self, number: int, end: pa.Table) -> None:
        """The end records what the slice holds: fewer chunks or other rows than it says is data lost too."""
        chunks, rows = end_chunks(end), end_counts(end)["rows"]
        if (chunks is not None and chunks != number) or rows != self.rows:
            self._data_lost(f"its end records {chunks} chunks and {rows} rows, but {number} chunks and {self.rows} "
                            f"rows were there", "")

    def _data_lost(self, what: str, afresh: str) -> None:
        """Chunks FINed long ago are gone from the slice: failOnDataLoss fails the task; otherwise a warning, and
        ``afresh`` (a lost chunk number) is read from nsqd again."""
        spec = self.plan.spec
        where = (f"slice {self.slice.directory} (batch {self.plan.batch}, topic {spec.topic!r}, nsqd {spec.nsqd}) "
                 f"lost data in the nsq source's write-ahead location: {what}")
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{where}. Those rows were FINed and cannot be replayed: restore the location, or set "
                                f"failOnDataLoss=false to go on without them (the batch's rows will differ)")
        log.warning("%s (failOnDataLoss=false: %s); the batch's rows differ from its first run", where,
                    f"reading {afresh} afresh from nsqd" if afresh else "going on")

    def _remaining(self) -> tuple[int, int]:
        rows = self.plan.spec.quota - self.rows
        byte_quota = self.plan.spec.byte_quota or (1 << 62)
        return rows, byte_quota - self.bytes

    def _next_chunk(self, number: int) -> pa.Table:
        """Chunk ``number`` as published: this attempt's messages, or the end, or whatever another attempt won."""
        rows, size = self._remaining()
        messages: list[Message] = []
        if not self.done_reading and rows > 0 and size > 0:
            messages = self._take(rows, min(size, _CHUNK_BYTES))
        if not messages:
            self.subscription.close()  # first: its last hand-backs and refused FINs go into the end's counts
            self.slice.finish(number, ARROW_SCHEMA, self.rows, self.counts())
            self._check_open([])
            return self._published(number)
        spec = self.plan.spec
        table = message_table(messages, spec.topic, self.plan.channel, [spec.nsqd] * len(messages))
        try:
            won = self.slice.publish(number, table)
        except OSError as err:
            won = self._settle_failed_offer(number, table, messages, err)
        self._check_open(messages)
        self.fresh_chunks += won
        if not won:
            log.info("slice %s chunk %d was published by another attempt: handing back %d messages",
                     self.slice.directory, number, len(messages))
            self.subscription.requeue(messages)
            return self._published(number)
        rows_after = rows - len(messages)
        self.subscription.settle(messages, 0 if self.done_reading else min(rows_after, self.subscription.max_rdy))
        return table

    def _settle_failed_offer(self, number: int, table: pa.Table, messages: list[Message], err: OSError) -> bool:
        """Whether this attempt won chunk ``number`` although its publish failed with ``err``. The error may come
        after the offer was stored (a reply lost after the write, a failover mid-agreement, the directory's fsync
        after the link); failing with the messages in hand would let the retry adopt that offer while nsqd delivers
        them again. So the slice is asked who won (on object stores the question takes part in deciding): another
        attempt's chunk, False; this attempt's, durable, True. No offer, or one whose durability is unknown (a failed
        fsync that a later one cannot vouch for): the messages go back to nsqd and the task fails."""
        chunk = f"chunk {number} of {self.slice.directory}"
        log.warning("publishing %s failed, asking who won it: %s", chunk, err)
        winner = self._ask_location(lambda: self.slice.read(number), messages,
                                    f"whether {chunk} holds this attempt's {len(messages)} messages")
        if winner is None:
            self.subscription.requeue(messages)
            raise UnsettledChunkError(f"could not publish {chunk}: {err}; nothing was stored, so its {len(messages)} "
                                      f"messages were handed back to nsqd") from err
        if not winner.column("id").equals(table.column("id")):
            return False
        if self.store.chunks.visible_before_durable:
            self.subscription.requeue(messages)
            raise UnsettledChunkError(
                f"{chunk} holds this attempt's {len(messages)} messages, but making it durable failed: {err}. Whether "
                f"it survives a crash is unknown, so they were handed back to nsqd rather than FINed: they are read "
                f"again (twice if the chunk survives), never lost") from err
        log.warning("%s holds this attempt's %d messages despite the error: FINing them", chunk, len(messages))
        return True

    def _ask_location(self, ask: Callable[[], _T], held: list[Message], what: str) -> _T:
        """``ask`` the write-ahead location, again after each pause of `_SETTLE_PAUSES` while it fails (the keeper
        TOUCHes ``held`` meanwhile); when it still fails, ``held`` goes back to nsqd and the task fails."""
        pauses = iter(_SETTLE_PAUSES)
        while True:
            try:
                return ask()
            except OSError as err:
                pause = next(pauses, None)
                if pause is None:
                    self.subscription.requeue(held)
                    raise UnsettledChunkError(
                        f"could not tell {what}: the write-ahead location failed {len(_SETTLE_PAUSES) + 1} times, "
                        f"last {err}. The {len(held)} messages were handed back to nsqd rather than FINed: they are "
                        f"read again (twice if a published chunk holds them), never lost") from err
                log.warning("could not tell %s, asking again in %gs: %s", what, pause, err)
                time.sleep(pause)

    def _check_open(self, held: list[Message]) -> None:
        """An attempt still running after its batch was committed (a speculative copy, an executor Spark gave up on)
        must not FIN: no committed batch would hold those rows. It hands them back and stops."""
        batch = self.plan.batch
        if self._ask_location(lambda: self.store.is_open(batch), held, f"whether batch {batch} is still open"):
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
        """One chunk's messages from nsqd, or a trial of suspects on their own (trials.py); marks the slice done
        when nsqd is quiet or unreachable."""
        while True:
            try:
                messages, quiet = self.subscription.take(limit, max_bytes)
            except (NSQError, OSError) as err:
                return self._unreachable(err)
            if self.opts.max_attempts and any(m.attempts > self.opts.max_attempts for m in messages):
                messages = self._suspects_apart(messages)
            self.done_reading = (quiet and not self.subscription.pending) or len(messages) >= self._remaining()[0]
            if messages or self.done_reading:  # else all were dead letters: take again
                return messages

    def _suspects_apart(self, messages: list[Message]) -> list[Message]:
        """Dead-letter the suspects that two trials which stayed held (one with them alone), and return the next
        trial on its own (the other messages wait in front of the next take), or the messages left when there is
        none."""
        trials = Trials(self.store, self.plan.spec.topic, self.plan.spec.nsqd)
        try:
            failed = trials.failed()
            verdicts = trials.judge([m for m in messages if m.attempts > self.opts.max_attempts], failed)
            if verdicts.dead:
                self.subscription.dead_letter(verdicts.dead)
                failed = explained(frozenset(m.id for m in verdicts.dead), failed)
            tried = verdicts.next_trial()
            if tried:
                trial_ids = {m.id for m in tried}
                self.subscription.put_back([m for m in self.subscription.in_hand if m.id not in trial_ids])
                self.subscription.trial = trials.start(tried, failed)
        except OSError:  # the write-ahead location fails: hand everything back
            self.subscription.put_back(self.subscription.in_hand)
            raise
        return list(self.subscription.in_hand)

    def _unreachable(self, err: Exception) -> list[Message]:
        """nsqd went away mid-slice: what it delivered unpublished comes back after msg_timeout. The slice ends here
        (its end tells the driver, which backs off from that nsqd) unless failOnUnreachable asks to fail the task.
        A connection that cannot work as configured (TLS, AUTH, a refused name) fails the task whatever the
        options: skipping it would read nothing, forever."""
        self.subscription.close()
        nsqd = self.plan.spec.nsqd
        refusal = as_config_error(err, nsqd)
        if refusal is err:  # no retry or wait fixes it: fail the task, and so the query, naming the cause
            raise err
        if refusal is not None:
            raise refusal from err
        if self.opts.fail_on_unreachable:
            raise NSQConnectionError(f"nsqd {nsqd} cannot be reached (failOnUnreachable): {err}") from err
        log.warning("nsqd %s cannot be reached; slice %s ends with %d rows: %s", nsqd, self.slice.directory,
                    self.rows, err)
        self.unreachable = 1
        self.done_reading = True
        return []

    def counts(self) -> dict[str, int]:
        """What this attempt did, as the query progress reports it (the end of the slice records it)."""
        return {"freshChunks": self.fresh_chunks, "replayedChunks": self.replayed_chunks,
                "handedBack": self.handed_back, "deadLettered": self.dead_lettered, "finFailed": self.fin_failed,
                "unreachableSlices": self.unreachable}

    @property
    def handed_back(self) -> int:
        """Messages this task gave back to nsqd unread (REQ): past its quota or the cutoff, a lost race."""
        return self.subscription.handed_back

    @property
    def dead_lettered(self) -> int:
        return self.subscription.dead_lettered

    @property
    def fin_failed(self) -> int:
        """FINs nsqd refused: those messages come again although a published chunk holds them."""
        return self.subscription.fin_failed
