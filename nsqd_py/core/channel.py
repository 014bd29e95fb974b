"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Channel: one consumer group's queue, its in-flight and deferred messages, and dispatch.

Dispatch happens in the calling greenlet (publisher, RDY, FIN, scan loop): a ready consumer gets
the message frame appended to its output buffer, with no greenlet hop or queue per message.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Final

import gevent

from ..config.options import TOPOLOGY_EXPERIMENT
from ..config.queue_settings import REJECT_PUBLISH, QueueSettings, dead_letter_topic
from .consumer import TOPOLOGY_REGION, TOPOLOGY_ZONE, Consumer
from .disk.deferred_store import DeferredStore
from .e2e import E2ELatency
from .errors import BackendError, ExitingError, MessageError
from .message import Message, Parked, park, parked_body_size, parked_delay, unpark
from .message_queue import MessageQueue

if TYPE_CHECKING:
    from .nsqd import NSQD
    from .topic import Topic

#: deliveries between cooperative yields while draining a backlog
_YIELD_EVERY: Final = 512


class Channel:
    __slots__ = (
        "_clients",
        "_dead_letter_topic",
        "_dead_letters_moving",
        "_deferred",
        "_deferred_bytes",
        "_deferred_heap",
        "_dispatching",
        "_drops_logged",
        "_in_flight",
        "_in_flight_bytes",
        "_in_flight_order",
        "_last_order",
        "_last_timeout",
        "_max_msg_timeout",
        "_mem_size",
        "_nsqd",
        "_queue",
        "_rr",
        "_seq",
        "_settling",
        "_shadow_reads",
        "_shadowed",
        "_store",
        "_topology",
        "_touched_heap",
        "dead_letter_count",
        "dropped_count",
        "e2e_latency",
        "ephemeral",
        "exiting",
        "expired_count",
        "global_msg_count",
        "max_attempts",
        "max_bytes",
        "max_depth",
        "message_count",
        "msg_ttl",
        "name",
        "paused",
        "region_local_msg_count",
        "reject_publish",
        "requeue_count",
        "settings",
        "timeout_count",
        "topic",
        "zone_local_msg_count",
    )

    def __init__(self, topic: Topic, name: str, nsqd: NSQD) -> None:
        self.topic = topic
        self.name = name
        self._nsqd = nsqd
        self.ephemeral = name.endswith("#ephemeral")
        self._mem_size = nsqd.opts.mem_queue_size
        self._max_msg_timeout = nsqd.opts.max_msg_timeout / 1e9
        self._queue = MessageQueue(nsqd.new_backend(f"{topic.name}:{name}", self.ephemeral), self._mem_size,
                                   nsqd.logger, f"CHANNEL({name})")
        self._clients: list[Consumer] = []
        self._rr = 0
        self._in_flight: dict[bytes, Message] = {}
        #: deliveries in order, one queue per client msg_timeout: each is in deadline order, so timeouts are
        #: found at the front without a heap (a FINed message stays until trimmed off the front)
        self._in_flight_order: dict[float, deque[Message]] = {}
        #: the queue of _in_flight_order last used and its timeout (most channels have one: no float hashed per
        #: delivery and FIN)
        self._last_order: deque[Message] | None = None
        self._last_timeout = 0.0
        #: TOUCHed messages whose first deadline passed, by their new deadline
        self._touched_heap: list[tuple[float, int, Message]] = []
        self._deferred: dict[bytes, Message] = {}
        #: the bodies in flight and deferred, summed (max_channel_bytes counts them with the queue's)
        self._in_flight_bytes = 0
        self._deferred_bytes = 0
        self._deferred_heap: list[tuple[float, int, Message]] = []
        self._seq = itertools.count()
        #: --persist-deferred: the deferred messages on disk with their due times (disk/deferred_store.py); how
        #: many of the disk queue's first reads may be copies of them that the last shutdown flushed there, and the
        #: ids of those that came due meanwhile (the others are still in _deferred)
        self._store: DeferredStore | None = None
        self._shadowed: set[bytes] = set()
        self._shadow_reads = 0
        #: batches of due messages whose store entries go once the queue has them (a compaction waits for them)
        self._settling = 0
        self._dispatching = False
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        #: topology-aware consumption (nsqd master's experiment): nearest ready consumer first, deliveries counted by
        #: how near their consumer is
        self._topology = TOPOLOGY_EXPERIMENT in nsqd.opts.enable_experiment
        self.zone_local_msg_count = 0
        self.region_local_msg_count = 0
        self.global_msg_count = 0
        #: FIN latencies, when --e2e-processing-latency-percentile is set
        self.e2e_latency = E2ELatency.for_options(nsqd.opts)
        #: the controls beyond nsqd set on this channel; the values in force are copied below by settings_changed
        self.settings = QueueSettings(nsqd.opts, topic.settings)
        #: max_channel_depth and max_channel_bytes in force (0: no limit), and whether a limit refuses publishes
        #: (else drops the head)
        self.max_depth = 0
        self.max_bytes = 0
        self.reject_publish = False
        self.dropped_count = 0
        self._drops_logged = 0.0
        #: msg_ttl in force, ns (0: none), and the messages it dropped
        self.msg_ttl = 0
        self.expired_count = 0
        #: max_attempts in force (0: none), the topic its dead letters go to, those moving there, and how many went
        self.max_attempts = 0
        self._dead_letter_topic = ""
        self._dead_letters_moving: set[gevent.Greenlet] = set()
        self.dead_letter_count = 0
        self.settings_changed()
        if nsqd.opts.persist_deferred and not self.ephemeral:
            self._open_store()

    # ---- introspection (stats) ----------------------------------------------------------------

    @property
    def clients(self) -> list[Consumer]:
        return list(self._clients)

    def depth(self) -> int:
        return len(self._queue)

    def backend_depth(self) -> int:
        return self._queue.backend_depth()

    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def deferred_count(self) -> int:
        return len(self._deferred)

    def held_count(self) -> int:
        """What max_channel_depth counts: queued (memory and disk), in flight and deferred."""
        return len(self._queue) + len(self._in_flight) + len(self._deferred)

    def held_bytes(self) -> int:
        """What max_channel_bytes counts: the bodies of the same messages, summed."""
        return self._queue.body_bytes() + self._in_flight_bytes + self._deferred_bytes

    # ---- peek (beyond nsqd: http_api/peek.py) ---------------------------------------------------

    def peek(self, limit: int, state: str = "") -> list[tuple[str, Message, int]]:
        """Up to ``limit`` messages, touching none: the queued in the order dispatch hands them out, then those in
        flight by deadline, then the deferred by due time (``state``: only ``queued``, ``in_flight`` or
        ``deferred``). Each comes as (state, message, its deadline or due time in Unix ms, 0 when queued). Queued
        messages are copies; the others are the channel's own, to read and not to change."""
        found: list[tuple[str, Message, int]] = []
        if state in ("", "queued"):
            found.extend(("queued", msg, 0) for msg in self._peek_queued(limit))
        wall_ms, now = time.time_ns() / 1e6, time.monotonic()
        if state in ("", "in_flight") and len(found) < limit:
            flying = sorted(self._in_flight.values(), key=lambda m: (m.deadline, m.deliver_ts))
            found.extend(("in_flight", msg, int(wall_ms + (msg.deadline - now) * 1000))
                         for msg in flying[:limit - len(found)])
        if state in ("", "deferred") and len(found) < limit:
            deferred = self._deferred
            due = heapq.nsmallest(limit - len(found),
                                  [entry for entry in self._deferred_heap if deferred.get(entry[2].id) is entry[2]])
            found.extend(("deferred", msg, int(wall_ms + (at - now) * 1000)) for at, _, msg in due)
        return found

    def _peek_queued(self, limit: int) -> list[Message]:
        """The queue's next ``limit`` messages, without the flushed copies of deferred ones dispatch would drop
        (--persist-deferred's shadowed records, among the first disk reads)."""
        want = limit
        while True:
            peeked = self._queue.peek(want)
            kept: list[Message] = []
            disk_reads = 0
            for msg, on_disk in peeked:
                if on_disk:
                    disk_reads += 1
                    if disk_reads <= self._shadow_reads and self._is_shadowed(msg.id):
                        continue
                kept.append(msg)
            if len(kept) >= limit or len(peeked) < want:
                return kept[:limit]
            want += limit - len(kept)

    # ---- bounds (beyond nsqd: config/queue_settings.py) ----------------------------------------

    def settings_changed(self) -> None:
        """Take the settings now in force; a lower drop-head limit drops the oldest queued messages at once."""
        self.max_depth = self.settings.value("max_channel_depth")
        self.max_bytes = self.settings.value("max_channel_bytes")
        self.msg_ttl = self.settings.value("msg_ttl")
        target = dead_letter_topic(self.settings.value("dead_letter_topic"), self.topic.name)
        self.max_attempts = self.settings.value("max_attempts") if target is not None else 0
        self._dead_letter_topic = target or ""
        bounded = bool(self.max_depth or self.max_bytes)
        self.reject_publish = bounded and self.settings.value("channel_overflow") == REJECT_PUBLISH
        if bounded and not self.reject_publish:
            self._drop_to_fit(0, 0)

    def _over(self, count: int, size: int) -> bool:
        """Whether ``count`` more messages with bodies of ``size`` bytes together would pass a limit in force."""
        return bool(self.max_depth and self.held_count() + count > self.max_depth) or \
            bool(self.max_bytes and self.held_bytes() + size > self.max_bytes)

    def rejects(self, count: int, size: int) -> bool:
        """Whether a publish of ``count`` messages (``size`` bytes of bodies) would put this reject-publish channel
        over its limit."""
        return self._over(count, size)

    def limits(self) -> str:
        """The limits in force, as a refusal or the log names them (``max_channel_depth 1000``)."""
        named = [f"max_channel_depth {self.max_depth}"] if self.max_depth else []
        if self.max_bytes:
            named.append(f"max_channel_bytes {self.max_bytes}")
        return ", ".join(named)

    def _drop_to_fit(self, count: int, size: int) -> bool:
        """drop-head: drop the oldest queued messages until ``count`` more with ``size`` bytes of bodies fit; False
        when they cannot (what is left is in flight or deferred, or the message alone is over max_channel_bytes)."""
        if self.max_bytes and size > self.max_bytes:
            return False  # it never fits: only it goes
        dropped = 0
        fits = True
        while self._over(count, size):
            msg = self._queue.pop()
            if msg is None:
                fits = False
                break
            if self._shadow_reads and self._shadowed_copy(msg):
                continue
            self._release_token(msg)
            dropped += 1
        self._dropped(dropped)
        return fits

    def _dropped(self, count: int) -> None:
        """Count drop-head's drops; say so in the log at most once a second."""
        self.dropped_count += count
        now = time.monotonic()
        if count and now - self._drops_logged >= 1.0:
            self._drops_logged = now
            self._nsqd.logger.warn(f"CHANNEL({self.name}): {self.limits()} reached (drop-head): "
                                   f"{self.dropped_count} dropped so far")

    # ---- consumers ----------------------------------------------------------------------------

    def add_client(self, client: Consumer) -> None:
        """Register a subscriber; ExitingError if the channel is going away, MessageError if full."""
        if self.exiting:
            raise ExitingError()
        if client in self._clients:
            return
        limit = self._nsqd.opts.max_channel_consumers
        if limit and len(self._clients) >= limit:
            raise MessageError(f"consumers for {self.topic.name}:{self.name} exceeds limit of {limit}")
        if self._topology:
            client.topology = client.topology_of(self._nsqd.opts.topology_zone, self._nsqd.opts.topology_region)
        self._clients.append(client)

    def remove_client(self, client: Consumer) -> None:
        """Forget a subscriber. Its in-flight messages come back when they time out, like nsqd."""
        try:
            self._clients.remove(client)
        except ValueError:
            return
        if self.ephemeral and not self._clients and not self.exiting:
            gevent.spawn(self.topic.delete_existing_channel, self.name)

    # ---- putting messages in --------------------------------------------------------------------

    def put_parked(self, parked: Parked) -> None:
        """A message from the topic, still parked (every channel shares the same record): handed
        to a ready consumer at once, else queued without building an object.

        With --mem-queue-size=0 every message goes through the disk queue first, so nothing a
        publisher was told OK about lives only in memory; a DPUB delay is then lost, as in nsqd
        (#1375), because a deferred message held only in memory would not survive a crash - unless
        --persist-deferred keeps it on disk, delay and all.
        """
        self.message_count += 1
        if (self.max_depth or self.max_bytes) and not self.reject_publish and \
                not self._drop_to_fit(1, parked_body_size(parked)):
            self._dropped(1)  # the limit is all in flight or deferred: the new message is the oldest queued
            return
        mem_size = self._mem_size
        if mem_size or self._store is not None:
            delay = parked_delay(parked)
            if delay:
                self._start_deferred(unpark(parked), delay)
                return
        if mem_size and not self.paused and not self._dispatching and not self._queue:
            client = self._next_ready_client()
            if client is not None:
                self._deliver(client, unpark(parked))
                return
        self._enqueue_parked(parked)
        if not mem_size:
            self.dispatch()

    def put_parked_batch(self, batch: list[Parked]) -> None:
        """One publish's messages (all with the same delay). While no consumer could take one now - a
        backlog, or nobody ready - they are queued in one step, which is where put_parked would send each
        of them; otherwise each goes through put_parked."""
        if self._mem_size and not (self.max_depth or self.max_bytes) and not parked_delay(batch[0]) and (
                self.paused or self._dispatching or self._queue or not any(c.is_ready() for c in self._clients)):
            self.message_count += len(batch)
            try:
                to_disk = self._queue.push_parked_batch(batch)
            except BackendError as err:
                self._write_failed(err)
                return
            if to_disk:
                self._nsqd.set_health(None)
            return
        for parked in batch:
            self.put_parked(parked)

    def _enqueue(self, msg: Message) -> None:
        self._enqueue_parked(park(msg))

    def _enqueue_parked(self, parked: Parked) -> None:
        try:
            to_disk = self._queue.push_parked(parked)
        except BackendError as err:
            self._write_failed(err)
            return
        if to_disk:
            self._nsqd.set_health(None)

    def _write_failed(self, err: BackendError) -> None:
        """A disk write failed: nsqd is unhealthy until one succeeds (the message is lost, as in nsqd; with
        --sync-every=1 its publisher gets an error instead of OK, see disk/acks.py)."""
        self._nsqd.set_health(err)
        self._nsqd.acks.failed(err)
        self._nsqd.logger.error(f"CHANNEL({self.name}): failed to write message to backend - {err}")

    def _release_token(self, msg: Message) -> None:
        """The record this copy was read from is no longer needed (FINed, or written anew)."""
        token = msg.token
        if token is not None:
            msg.token = None
            self._queue.ack(token)

    # ---- dispatch ------------------------------------------------------------------------------

    def _next_ready_client(self) -> Consumer | None:
        if self._topology:
            return self._nearest_ready_client()
        clients = self._clients
        n = len(clients)
        if n == 1:
            return clients[0] if clients[0].is_ready() else None
        for _ in range(n):
            self._rr = (self._rr + 1) % n
            client = clients[self._rr]
            if client.is_ready():
                return client
        return None

    def _nearest_ready_client(self) -> Consumer | None:
        """Round robin among the nearest ready consumers: the same zone, else the same region, else any, as Go
        master's put() offers a message (a level counts only where nsqd has its --topology-zone or -region)."""
        opts = self._nsqd.opts
        levels = (TOPOLOGY_ZONE if opts.topology_zone else -1, TOPOLOGY_REGION if opts.topology_region else -1)
        clients = self._clients
        n = len(clients)
        best: Consumer | None = None
        best_rank = -1
        best_at = self._rr
        for step in range(1, n + 1):
            at = (self._rr + step) % n
            client = clients[at]
            if not client.is_ready():
                continue
            rank = client.topology if client.topology in levels else 0
            if rank > best_rank:
                best, best_rank, best_at = client, rank, at
                if rank == TOPOLOGY_ZONE:
                    break
        self._rr = best_at
        return best

    def dispatch(self) -> None:
        """Hand queued messages to ready consumers until either runs out."""
        if self.paused or self._dispatching or self.exiting:
            return
        self._dispatching = True
        try:
            delivered = 0
            while True:
                client = self._next_ready_client()
                if client is None:
                    return
                msg = self._queue.pop()
                if msg is None:
                    return
                if self._shadow_reads and self._shadowed_copy(msg):
                    continue
                self._deliver(client, msg)
                delivered += 1
                if delivered % _YIELD_EVERY == 0:
                    gevent.sleep(0)
                    if self.paused or self.exiting:
                        return
        finally:
            self._dispatching = False

    def _deliver(self, client: Consumer, msg: Message) -> None:
        if self.msg_ttl and time.time_ns() - msg.timestamp > self.msg_ttl:
            self.expired_count += 1  # found expired on its way out, wherever it waited: dropped, not an attempt
            self._release_token(msg)
            return
        if self.max_attempts and msg.attempts >= self.max_attempts:
            self._dead_letter(msg)
            return
        if client.sample_rate and random.randrange(100) > client.sample_rate:
            self._release_token(msg)  # nsqd drops a sampled-out message for this channel
            return
        if msg.id in self._in_flight or msg.id in self._deferred:
            self._release_token(msg)  # a duplicate (redelivery after a crash): the live copy stands for it
            return
        if self._topology:
            self._count_topology(client)
        now = time.monotonic()
        timeout = client.msg_timeout
        msg.attempts += 1
        msg.client = client
        msg.deliver_ts = now
        msg.deadline = now + timeout
        self._in_flight[msg.id] = msg
        self._in_flight_bytes += len(msg.body)
        self._order_of(timeout).append(msg)
        client.in_flight_count += 1
        client.message_count += 1
        client.send_message(msg)

    def _order_of(self, timeout: float) -> deque[Message]:
        """The in-flight queue of ``timeout``, made when it has none."""
        order = self._last_order
        if order is not None and timeout == self._last_timeout:
            return order
        order = self._in_flight_order.get(timeout)
        if order is None:
            order = self._in_flight_order[timeout] = deque()
        self._last_order, self._last_timeout = order, timeout
        return order

    def _forget_in_flight(self) -> None:
        self._in_flight.clear()
        self._in_flight_order.clear()
        self._last_order = None

    def _count_topology(self, client: Consumer) -> None:
        if client.topology == TOPOLOGY_ZONE:
            self.zone_local_msg_count += 1
        elif client.topology == TOPOLOGY_REGION:
            self.region_local_msg_count += 1
        else:
            self.global_msg_count += 1

    # ---- FIN / REQ / TOUCH --------------------------------------------------------------------

    def _owned_in_flight(self, client: Consumer, msg_id: bytes) -> Message:
        msg = self._in_flight.get(msg_id)
        if msg is None:
            raise MessageError("ID not in flight")
        if msg.client is not client:
            raise MessageError("client does not own message")
        return msg

    def _pop_in_flight(self, client: Consumer, msg_id: bytes) -> Message:
        msg = self._owned_in_flight(client, msg_id)
        del self._in_flight[msg_id]
        self._in_flight_bytes -= len(msg.body)
        client.in_flight_count -= 1
        msg.client = None
        order = self._order_of(client.msg_timeout)
        while order and order[0].client is None:  # FINs mostly come in delivery order
            order.popleft()
        if len(order) > 2 * len(self._in_flight) + 64:  # out-of-order FINs piled up behind a slow one
            kept = [m for m in order if m.client is not None]
            order.clear()
            order.extend(kept)
        return msg

    def finish(self, client: Consumer, msg_id: bytes, dispatch: bool = True) -> Message:
        """FIN: the consumer is done with the message. A caller finishing a batch passes
        ``dispatch=False`` and calls :meth:`dispatch` once afterwards."""
        msg = self._pop_in_flight(client, msg_id)
        client.finish_count += 1
        if self.e2e_latency is not None:
            self.e2e_latency.insert(msg.timestamp)
        self._release_token(msg)
        if dispatch:
            self.dispatch()
        return msg

    def requeue(self, client: Consumer, msg_id: bytes, delay: float) -> None:
        """REQ: back into the queue now (delay 0) or after ``delay`` seconds."""
        msg = self._pop_in_flight(client, msg_id)
        client.requeue_count += 1
        self.requeue_count += 1
        if self.exiting:
            raise ExitingError()
        if delay > 0:
            self._start_deferred(msg, delay)
        else:
            self._enqueue(msg)
        self.dispatch()

    def touch(self, client: Consumer, msg_id: bytes) -> None:
        """TOUCH: a new deadline of the client's msg_timeout, capped at delivery + --max-msg-timeout."""
        msg = self._owned_in_flight(client, msg_id)
        msg.deadline = min(time.monotonic() + client.msg_timeout, msg.deliver_ts + self._max_msg_timeout)

    # ---- dead letters (beyond nsqd: max_attempts) ------------------------------------------------

    def _dead_letter(self, msg: Message) -> None:
        """Move a message past max_attempts to the dead-letter topic, unchanged (id, timestamp, attempts). Its copy
        here goes only once the dead-letter topic has it (on disk first, at the durable settings): a crash in between
        leaves a duplicate there, never a loss."""
        self.dead_letter_count += 1
        mover = gevent.spawn(self._move_dead_letter, msg)
        self._dead_letters_moving.add(mover)
        mover.link(self._dead_letters_moving.discard)

    def _move_dead_letter(self, msg: Message) -> None:
        try:
            self._nsqd.get_topic(self._dead_letter_topic).republish(msg.encode(), len(msg.body))
        except (ExitingError, BackendError) as err:
            self._nsqd.logger.error(f"CHANNEL({self.name}): failed to move message to dead-letter topic "
                                    f"{self._dead_letter_topic} - {err}")
            self.dead_letter_count -= 1
            if self.exiting:
                self._write_to_backend(msg)
            else:
                self._enqueue(msg)
            return
        self._release_token(msg)

    def _start_deferred(self, msg: Message, delay: float) -> None:
        store = self._store
        if store is not None:
            try:
                store.add(time.time_ns() + int(delay * 1e9), msg.encode())
            except BackendError as err:
                self._write_failed(err)  # deferred in memory only, as in nsqd; at --sync-every=1 its DPUB fails
            else:
                token = msg.token
                if token is not None:  # a REQ of a message read from disk: its record goes once the store has it
                    msg.token = None
                    store.when_durable(lambda: self._queue.ack(token))
        self._deferred[msg.id] = msg
        self._deferred_bytes += len(msg.body)
        heapq.heappush(self._deferred_heap, (time.monotonic() + delay, next(self._seq), msg))

    # ---- deferred messages on disk (beyond nsqd: --persist-deferred) -----------------------------

    def _open_store(self) -> None:
        """Open the channel's deferred store and defer again what it holds, each until its own due time."""
        store = DeferredStore(f"{self.topic.name}:{self.name}", self._nsqd.data_path, self._nsqd.logger,
                              self._nsqd.acks)
        try:
            entries = store.load()
        except OSError as err:
            self._nsqd.logger.error(f"CHANNEL({self.name}): failed to load deferred messages - {err}")
            return
        self._store = store
        now_wall, now = time.time_ns(), time.monotonic()
        heap = self._deferred_heap
        for due, record in entries:
            msg = unpark(record)
            self._deferred[msg.id] = msg
            self._deferred_bytes += len(msg.body)
            heap.append((now + (due - now_wall) / 1e9, next(self._seq), msg))
        heapq.heapify(heap)
        if store.needs_compaction():
            store.compact(self._deferred_entries())
        if entries:
            # the last clean shutdown also wrote these to the disk queue, for Go nsqd: those copies are not new
            self._shadow_reads = self._queue.backend_depth()

    def _shadowed_copy(self, msg: Message) -> bool:
        """Whether ``msg``, read from the disk queue, is the flushed copy of a message the store holds (then it is
        dropped). Only the records on disk at start-up can be: they are the first ``_shadow_reads`` reads."""
        if msg.token is None:
            return False
        self._shadow_reads -= 1
        copy = self._is_shadowed(msg.id)
        if copy:
            self._release_token(msg)
        if not self._shadow_reads:
            self._shadowed = set()
        return copy

    def _is_shadowed(self, msg_id: bytes) -> bool:
        """Whether a record among the first disk reads is a copy (two shutdowns in a row leave two of one)."""
        return msg_id in self._deferred or msg_id in self._shadowed

    def _left_store(self, begun: Any, ids: list[bytes]) -> None:
        """Due messages are queued: once the queue has them (on disk, at the durable settings) the store lets go."""
        store = self._store
        try:
            self._nsqd.acks.settle(begun)
        except BackendError:
            return  # the store keeps them: a restart delivers them again rather than not at all
        finally:
            self._settling -= 1
        if store is None or self.exiting:
            return
        for msg_id in ids:
            store.remove(msg_id)
        # a compaction keeps only what is deferred: not while other due messages are neither here nor settled
        if not self._settling and store.needs_compaction():
            store.compact(self._deferred_entries())

    def _deferred_entries(self) -> list[tuple[int, bytes]]:
        """Every deferred message with its due time (Unix ns), for a compaction of the store."""
        now_wall, now = time.time_ns(), time.monotonic()
        deferred = self._deferred
        return [(now_wall + int((due - now) * 1e9), msg.encode())
                for due, _, msg in self._deferred_heap if deferred.get(msg.id) is msg]

    # ---- timers (driven by the NSQD queue-scan loop) -----------------------------------------

    def process_in_flight(self, now: float) -> bool:
        """Requeue messages whose deadline passed; True when there was work."""
        worked = False
        for timeout, order in self._in_flight_order.items():
            while order and order[0].deliver_ts + timeout <= now:
                msg = order.popleft()
                if msg.client is None or self._in_flight.get(msg.id) is not msg:
                    continue  # finished or requeued since
                if msg.deadline > now:  # TOUCHed: wait for the new deadline
                    heapq.heappush(self._touched_heap, (msg.deadline, next(self._seq), msg))
                    continue
                self._time_out(msg)
                worked = True
        heap = self._touched_heap
        while heap and heap[0][0] <= now:
            deadline, _, msg = heapq.heappop(heap)
            if msg.client is None or self._in_flight.get(msg.id) is not msg:
                continue
            if msg.deadline > deadline:  # TOUCHed again
                heapq.heappush(heap, (msg.deadline, next(self._seq), msg))
                continue
            self._time_out(msg)
            worked = True
        if worked:
            self.dispatch()
        return worked

    def _time_out(self, msg: Message) -> None:
        del self._in_flight[msg.id]
        self._in_flight_bytes -= len(msg.body)
        self.timeout_count += 1
        owner = msg.client
        msg.client = None
        if isinstance(owner, Consumer):
            owner.in_flight_count -= 1
        self._enqueue(msg)

    def process_deferred(self, now: float) -> bool:
        """Move due deferred messages into the queue; True when there was work."""
        heap = self._deferred_heap
        if not heap or heap[0][0] > now:
            return False
        store = self._store
        begun = self._nsqd.acks.begin() if store is not None else None
        due: list[bytes] = []
        while heap and heap[0][0] <= now:
            _, _, msg = heapq.heappop(heap)
            if self._deferred.get(msg.id) is not msg:
                continue
            del self._deferred[msg.id]
            self._deferred_bytes -= len(msg.body)
            due.append(msg.id)
            if self._shadow_reads:
                self._shadowed.add(msg.id)  # its flushed copy may still be ahead in the disk queue
            self._enqueue(msg)
        if begun is not None and due:
            self._settling += 1
            gevent.spawn(self._left_store, begun, due)
        if due:
            self.dispatch()
        return bool(due)

    def sync_backend(self) -> None:
        if not self.exiting:
            self._queue.backend.sync()
            if self._store is not None:
                self._store.sync()

    # ---- pause / empty / close ----------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self.dispatch()

    def empty(self) -> None:
        """Drop queued, in-flight and deferred messages (nsqd's /channel/empty)."""
        self._queue.clear_memory()
        for client in self._clients:
            client.in_flight_count = 0
        self._forget_in_flight()
        self._touched_heap.clear()
        self._deferred.clear()
        self._deferred_heap.clear()
        self._in_flight_bytes = self._deferred_bytes = 0
        self._queue.backend.empty()
        self._shadowed = set()
        self._shadow_reads = 0
        if self._store is not None:
            self._store.clear()

    def drop_queued(self) -> int:
        """Drop the queued messages, memory and disk, keeping those in flight and deferred (beyond nsqd:
        /channel/reset); how many there were. Each is read off and acked, not the disk queue emptied: the records
        of the in-flight and deferred messages stay on disk until they are done, as always."""
        dropped = 0
        while True:
            msg = self._queue.pop()
            if msg is None:
                break
            self._release_token(msg)
            dropped += 1
            if dropped % _YIELD_EVERY == 0:
                gevent.sleep(0)
        self._shadowed = set()
        self._shadow_reads = 0
        return dropped

    def close(self, delete: bool) -> None:
        """Stop for good: ``delete`` drops everything, else every message is flushed to disk."""
        if self.exiting:
            return
        self.exiting = True
        log = self._nsqd.logger
        if delete:
            log.info(f"CHANNEL({self.name}): deleting")
        else:
            log.info(f"CHANNEL({self.name}): closing")
        for client in list(self._clients):
            client.close()
        gevent.joinall(list(self._dead_letters_moving), timeout=5)
        if delete:
            self._queue.clear_memory()
            self._forget_in_flight()  # compiled Messages are not GC-tracked: no cycle may outlive the channel
            self._touched_heap.clear()
            self._deferred.clear()
            self._queue.backend.delete()
            if self._store is not None:
                self._store.delete()
            return
        self._flush()
        self._queue.backend.close()
        if self._store is not None:
            self._store.close()  # its messages stay deferred for the next start; the disk queue has copies for Go

    def _flush(self) -> None:
        log = self._nsqd.logger
        memory = self._queue.take_memory()
        if memory or self._in_flight or self._deferred:
            log.info(
                f"CHANNEL({self.name}): flushing {len(memory)} memory {len(self._in_flight)} in-flight "
                f"{len(self._deferred)} deferred messages to backend"
            )
        pending = [*memory, *self._in_flight.values(), *self._deferred.values()]
        self._forget_in_flight()
        self._touched_heap.clear()
        self._deferred.clear()
        self._deferred_heap.clear()
        for msg in pending:
            self._write_to_backend(msg)

    def _write_to_backend(self, msg: Message) -> None:
        try:
            self._queue.write_to_backend(msg)
        except BackendError as err:
            self._nsqd.logger.error(f"CHANNEL({self.name}): failed to write message to backend - {err}")
