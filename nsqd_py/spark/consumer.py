"""The subscription behind the stream reader: it holds delivered messages until they are settled.

One background thread reads every connection (answering heartbeats), buffers the messages, TOUCHes every message
not yet settled (buffered, or planned into a micro-batch that Spark has not committed) every half msg_timeout,
reconnects dropped connections and, with lookupd, connects to nsqd nodes that appear. The reader takes messages
from the buffer and later FINs (Spark committed them) or REQs them. RDY over all connections adds up to
``max_in_flight``, and RDY is a window (nsqd counts unsettled messages against it), so this consumer never holds
more than that many messages; an nsqd gets several connections when that needs more than its RDY maximum. Past
``max_in_flight_bytes`` of unsettled bodies RDY drops to 0 until settling brings it back under: the budget keeps
large messages from filling the driver's memory, at the price of smaller batches.
"""

from __future__ import annotations

import logging
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..client.connection import Connection
from ..client.errors import NSQConnectionError, NSQError, ServerError
from ..client.peer import PeerLink
from ..client.protocol import Message, command, id_commands
from .connect import ConnectionConfigError, as_config_error, open_connection
from .discovery import topic_producers
from .options import ReadOptions

log = logging.getLogger(__name__)

_DEFAULT_MSG_TIMEOUT = 60.0
#: nsqd's default --max-rdy-count: an nsqd gets more than one connection when the in-flight budget needs it
_MAX_RDY = 2500
#: per nsqd: past this, a low --max-rdy-count shrinks the window instead
_MAX_CONNECTIONS = 100
_MAX_BACKOFF = 30.0


@dataclass(eq=False)
class _Link(PeerLink):
    """One nsqd address (its connection and reconnect delay) and the messages it delivered unsettled."""

    unsettled: dict[bytes, Message] = field(default_factory=dict)


class SourceConsumer:
    """Subscribes ``topic``/``channel`` on every configured (or discovered) nsqd."""

    def __init__(self, opts: ReadOptions, max_in_flight: int) -> None:
        self.opts = opts
        self.max_in_flight = max_in_flight
        self._links: dict[str, _Link] = {}
        self._buffer: deque[Message] = deque()
        self._lock = threading.Condition()
        self._selector = selectors.DefaultSelector()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        #: the in-flight share of each nsqd address
        self._per_address = max_in_flight
        self._paused = False
        #: body bytes of the unsettled messages, and whether that is over ``opts.max_in_flight_bytes``
        self._held_bytes = 0
        self._over_budget = False
        self._last_error: Exception | None = None
        self._touch_interval = _DEFAULT_MSG_TIMEOUT / 2
        self._next_touch = 0.0
        self._next_lookup = 0.0

    # -- life cycle ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect and subscribe, then start the background thread. With fixed nsqd addresses at least one must
        be reachable (NSQConnectionError otherwise); with lookupd, nsqd nodes are picked up as they appear."""
        addresses = self._discover()
        self._per_address = -(-self.max_in_flight // max(1, len(addresses)))
        for address in addresses:
            self._add(address)
        if isinstance(self._last_error, ConnectionConfigError):  # no retry fixes it: fail the query now
            raise self._last_error
        if self.opts.connect.nsqd_tcp_addresses and not any(link.conn for link in self._links.values()):
            raise NSQConnectionError(f"could not subscribe on any of {', '.join(sorted(addresses))}: "
                                     f"{self._last_error}")
        self._next_lookup = time.monotonic() + self.opts.lookupd_poll_interval
        self._thread = threading.Thread(target=self._run, name="nsq-consumer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread and close every connection (nsqd redelivers whatever is still unsettled)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            for link in self._links.values():
                conn = link.detach()
                if conn is not None:
                    conn.close()
        self._selector.close()

    # -- what the reader calls -----------------------------------------------------------------------------------

    def take(self, limit: int, wait: float = 0.0, admit: Callable[[Message], bool] | None = None) -> list[Message]:
        """Up to ``limit`` buffered messages (only those ``admit`` accepts), waiting up to ``wait`` seconds for the
        first. They stay unsettled (and TOUCHed) until `finish` or `requeue`."""
        deadline = time.monotonic() + wait
        with self._lock:
            while True:
                taken = self._take_locked(limit, admit)
                remaining = deadline - time.monotonic()
                if taken or remaining <= 0:
                    return taken
                self._lock.wait(remaining)

    def _take_locked(self, limit: int, admit: Callable[[Message], bool] | None) -> list[Message]:
        if admit is None:
            count = min(limit, len(self._buffer))
            return [self._buffer.popleft() for _ in range(count)]
        taken: list[Message] = []
        kept: deque[Message] = deque()
        for msg in self._buffer:
            (taken if len(taken) < limit and admit(msg) else kept).append(msg)
        self._buffer = kept
        return taken

    def finish(self, messages: Iterable[Message]) -> None:
        """FIN; messages whose connection has dropped since are skipped (nsqd redelivers those)."""
        self._settle(messages, lambda ids: id_commands("FIN", ids))

    def requeue(self, messages: Iterable[Message]) -> None:
        """REQ with no delay: back to the channel for the next consumer."""
        self._settle(messages, lambda ids: id_commands("REQ", ids, "0"))

    def requeue_buffered(self) -> None:
        """Stop receiving for good (RDY 0, also after reconnects) and hand back every message not taken yet."""
        with self._lock:
            self._paused = True
            self._rebalance()
            pending, self._buffer = list(self._buffer), deque()
        self.requeue(pending)

    def unsettled_count(self) -> int:
        with self._lock:
            return sum(len(link.unsettled) for link in self._links.values())

    def _settle(self, messages: Iterable[Message], encode: Callable[[list[bytes]], bytes]) -> None:
        by_conn: dict[Connection, list[bytes]] = {}
        with self._lock:
            links = {id(link.conn): link for link in self._links.values() if link.conn is not None}
            released = 0
            for msg in messages:
                link = links.get(id(msg.conn))
                if link is not None and link.unsettled.pop(msg.id, None) is not None:
                    by_conn.setdefault(msg.conn, []).append(msg.id)
                    released += len(msg.body)
            self._hold(-released)
        for conn, ids in by_conn.items():
            try:
                conn.send(encode(ids))
            except NSQConnectionError as err:
                log.warning("could not settle %d messages on %s: %s", len(ids), conn.address, err)

    # -- the background thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            now = time.monotonic()
            if now >= self._next_touch:
                self._touch_all()
                self._next_touch = now + self._touch_interval
            if self.opts.connect.lookupd_http_addresses and now >= self._next_lookup:
                self._poll_lookupd()
                self._next_lookup = now + self.opts.lookupd_poll_interval
            for link in list(self._links.values()):
                if link.conn is not None and link.conn.closed:  # a write failed
                    with self._lock:
                        self._drop(link, NSQConnectionError("connection closed"))
                if link.due(now):
                    self._connect(link)
            try:
                events = self._selector.select(min(0.5, max(0.0, self._next_touch - now)))
            except (OSError, ValueError):
                events = []  # a connection closed under select(); its link is dropped below or already
            for key, _ in events:
                self._drain(key.data)

    def _drain(self, link: _Link) -> None:
        conn = link.conn
        if conn is None:
            return
        delivered: list[Message] = []
        try:
            while frames := conn.read_frames():
                for frame in frames:
                    if isinstance(frame, Message):
                        delivered.append(frame)
                    elif isinstance(frame, ServerError):
                        log.log(logging.ERROR if frame.fatal else logging.DEBUG, "nsqd %s: %s", link.address,
                                frame)
        except NSQError as err:
            with self._lock:
                self._deliver(link, delivered)
                self._drop(link, err)
            return
        with self._lock:
            self._deliver(link, delivered)

    def _deliver(self, link: _Link, messages: list[Message]) -> None:
        if not messages:
            return
        unsettled = link.unsettled
        size = 0
        for msg in messages:
            unsettled[msg.id] = msg
            size += len(msg.body)
        self._buffer.extend(messages)
        self._hold(size)
        self._lock.notify_all()

    def _hold(self, change: int) -> None:
        """Count bytes taken on (or, negative, settled); pause or resume delivery at the budget (lock held)."""
        self._held_bytes += change
        over = self._held_bytes >= self.opts.max_in_flight_bytes
        if over != self._over_budget:
            self._over_budget = over
            self._rebalance()

    def _touch_all(self) -> None:
        with self._lock:
            batches = [(link, id_commands("TOUCH", list(link.unsettled))) for link in self._links.values()
                       if link.conn is not None and link.unsettled]
        for link, commands in batches:
            self._send(link, commands)

    def _poll_lookupd(self) -> None:
        known = {link.address for link in self._links.values()}
        for address in self._discover() - known:
            log.info("lookupd lists nsqd %s for topic %s", address, self.opts.topic)
            self._add(address)

    def _discover(self) -> set[str]:
        if self.opts.connect.nsqd_tcp_addresses:
            return set(self.opts.connect.nsqd_tcp_addresses)
        return topic_producers(self.opts.connect.lookupd_http_addresses, self.opts.topic)

    # -- connections ---------------------------------------------------------------------------------------------

    def _add(self, address: str) -> None:
        """Subscribe on ``address`` now, with as many more connections as its RDY maximum makes the in-flight
        share need; the background thread opens those, so messages flow while they connect."""
        first = _Link(address)
        with self._lock:
            self._links[f"{address}/0"] = first
        self._connect(first)
        cap = int(first.conn.negotiated.get("max_rdy_count", _MAX_RDY)) if first.conn is not None else _MAX_RDY
        needed = -(-self._per_address // max(1, cap))
        if needed > _MAX_CONNECTIONS:
            log.warning("nsqd %s allows RDY %d per connection: %d connections would be needed for %d in flight; "
                        "opening %d (raise nsqd's --max-rdy-count)", address, cap, needed, self._per_address,
                        _MAX_CONNECTIONS)
        with self._lock:
            for i in range(1, min(needed, _MAX_CONNECTIONS)):
                self._links[f"{address}/{i}"] = _Link(address)

    def _connect(self, link: _Link) -> None:
        try:
            conn = open_connection(link.address, self.opts.connect)
            try:
                conn.sub(self.opts.topic, self.opts.channel)
            except BaseException:
                conn.close()
                raise
        except (NSQError, OSError) as err:
            self._last_error = as_config_error(err, link.address) or err
            delay = link.retry_later(_MAX_BACKOFF)
            log.warning("cannot subscribe on %s (retrying in %.0fs): %s", link.address, delay, err)
            return
        msg_timeout = conn.negotiated.get("msg_timeout", _DEFAULT_MSG_TIMEOUT * 1000) / 1000
        with self._lock:
            link.attach(conn)
            self._touch_interval = min(self._touch_interval, msg_timeout / 2)
            self._selector.register(link.fd, selectors.EVENT_READ, link)
            self._rebalance()
        log.info("subscribed to %s/%s on %s", self.opts.topic, self.opts.channel, link.address)

    def _drop(self, link: _Link, err: Exception) -> None:
        """Forget a connection (lock held): its unsettled messages come back from nsqd after their timeout."""
        if link.conn is None:
            return
        log.warning("lost nsqd %s (%d unsettled messages will be redelivered): %s",
                    link.address, len(link.unsettled), err)
        self._selector.unregister(link.fd)
        conn = link.detach()
        assert conn is not None
        conn.close()
        self._buffer = deque(msg for msg in self._buffer if msg.conn is not conn)
        dropped = sum(len(msg.body) for msg in link.unsettled.values())
        link.unsettled.clear()
        link.retry_later(_MAX_BACKOFF)
        self._hold(-dropped)
        self._rebalance()

    def _rebalance(self) -> None:
        """Share ``max_in_flight`` as RDY among the live connections (lock held)."""
        live = [link for link in self._links.values() if link.conn is not None]
        for link in live:
            assert link.conn is not None
            cap = int(link.conn.negotiated.get("max_rdy_count", _MAX_RDY))
            rdy = 0 if self._paused or self._over_budget else max(1, min(cap, self.max_in_flight // len(live)))
            self._send(link, command("RDY", str(rdy)))

    def _send(self, link: _Link, raw: bytes) -> None:
        conn = link.conn
        if conn is None:
            return
        try:
            conn.send(raw)
        except NSQConnectionError as err:
            log.warning("write to %s failed: %s", link.address, err)
