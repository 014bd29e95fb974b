"""A single-threaded consumer of one topic/channel across several nsqd, found directly or through lookupd."""

from __future__ import annotations

import contextlib
import selectors
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..runtime.log import ERROR, INFO, WARN
from .connection import DEFAULT_USER_AGENT, Connection
from .errors import HTTPError, NSQError
from .http import DEFAULT_TIMEOUT, lookup_producers
from .peer import PeerLink
from .protocol import CLOSE_WAIT, Message, Response

LogFunc = Callable[[int, str], None]

#: go-nsq's starvation rule: a connection holding 85 % of its RDY window un-FINed is starved
_STARVED_RATIO = 0.85


@dataclass(eq=False)
class _Peer(PeerLink):
    """One nsqd address, our connection to it and that connection's flow-control state."""

    in_flight: int = 0
    rdy: int = 0
    close_wait: bool = False


class Consumer:
    """SUB ``topic``/``channel`` on every nsqd in ``nsqd_tcp_addresses`` and on those that lookupd lists.

    Drive it from one thread: `poll()` returns the messages that arrived (answering heartbeats meanwhile),
    and `fin`/`req`/`touch` settle them. ``max_in_flight`` is split over the connections (at least 1 each) as
    their RDY. A connection that fails is retried with a doubling delay up to ``max_reconnect_interval``,
    lookupd is asked again every ``lookupd_poll_interval``. `stop()` sends CLS; `drained` tells when every
    connection has answered CLOSE_WAIT and nothing is left in flight.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        *,
        nsqd_tcp_addresses: Iterable[str] = (),
        lookupd_http_addresses: Iterable[str] = (),
        max_in_flight: int = 1,
        identify: Mapping[str, Any] | None = None,
        tls_context: ssl.SSLContext | None = None,
        timeout: float = 5.0,
        lookupd_poll_interval: float = 60.0,
        max_reconnect_interval: float = 15.0,
        http_timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        user_agent: str = DEFAULT_USER_AGENT,
        log: LogFunc | None = None,
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.max_in_flight = max_in_flight
        self.identify_fields = dict(identify or {})
        self.tls_context = tls_context
        self.timeout = timeout
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        self.lookupd_poll_interval = lookupd_poll_interval
        self.max_reconnect_interval = max_reconnect_interval
        self.http_timeout = http_timeout
        self.user_agent = user_agent
        self.stopping = False
        self._log_func = log
        self._peers = {addr: _Peer(addr) for addr in nsqd_tcp_addresses}
        self._by_conn: dict[int, _Peer] = {}
        self._selector = selectors.DefaultSelector()
        self._next_lookup = 0.0

    # -- public API --------------------------------------------------------------------------------------------

    def connect(self) -> int:
        """Query lookupd and try every nsqd once now (failures are logged and retried later); live count."""
        self._maintain(time.monotonic())
        return len(self._live())

    def poll(self, timeout: float) -> list[Message]:
        """Wait up to ``timeout`` seconds for messages; returns every message that is ready (maybe none)."""
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            self._maintain(now)
            live = self._live()
            ready = [p for p in live if p.conn is not None and p.conn.has_buffered()]
            if not ready:
                wait = max(0.0, min(deadline, self._next_wakeup()) - now)
                if live:
                    ready = [key.data for key, _ in self._selector.select(wait)]
                else:
                    time.sleep(wait)
            out: list[Message] = []
            for peer in ready:
                self._drain(peer, out)
            if out or time.monotonic() >= deadline:
                return out

    def fin(self, msg: Message) -> bool:
        """FIN; False if the message's connection is gone (nsqd will redeliver it after its timeout)."""
        return self._send(msg, lambda conn: conn.fin(msg.id), settles=True)

    def req(self, msg: Message, delay_ms: int = 0) -> bool:
        """REQ with a delay; False if the message's connection is gone."""
        return self._send(msg, lambda conn: conn.req(msg.id, delay_ms), settles=True)

    def touch(self, msg: Message) -> bool:
        """TOUCH (reset the message's timeout); False if its connection is gone."""
        return self._send(msg, lambda conn: conn.touch(msg.id), settles=False)

    @property
    def in_flight(self) -> int:
        return sum(p.in_flight for p in self._live())

    def is_starved(self) -> bool:
        """Some connection is (nearly) out of RDY window: time to settle what has been handed out."""
        return any(p.in_flight > 0 and p.in_flight >= p.rdy * _STARVED_RATIO for p in self._live())

    def connected(self) -> list[str]:
        """Addresses with a live subscription."""
        return [p.address for p in self._live()]

    def stop(self) -> None:
        """Send CLS everywhere and stop reconnecting; keep polling and settling until `drained`."""
        self.stopping = True
        for peer in self._live():
            try:
                peer.conn.cls()  # type: ignore[union-attr]
            except NSQError as err:
                self._lost(peer, err)

    @property
    def drained(self) -> bool:
        """After `stop()`: every connection acknowledged CLS (or is gone) and nothing is in flight."""
        return all(p.close_wait and p.in_flight == 0 for p in self._live())

    def close(self) -> None:
        """Close every connection (unsettled messages go back to the channel after their timeout)."""
        self.stopping = True
        for peer in self._peers.values():
            self._disconnect(peer)
        self._selector.close()

    # -- internals ---------------------------------------------------------------------------------------------

    def _log(self, level: int, msg: str) -> None:
        if self._log_func is not None:
            self._log_func(level, f"[{self.topic}/{self.channel}] {msg}")

    def _live(self) -> list[_Peer]:
        return [p for p in self._peers.values() if p.conn is not None]

    def _next_wakeup(self) -> float:
        times = [p.retry_at for p in self._peers.values() if p.conn is None and not self.stopping]
        if self.lookupd_http_addresses and not self.stopping:
            times.append(self._next_lookup)
        return min(times, default=float("inf"))

    def _maintain(self, now: float) -> None:
        if self.stopping:
            return
        if self.lookupd_http_addresses and now >= self._next_lookup:
            self._next_lookup = now + self.lookupd_poll_interval
            self._query_lookupd()
        changed = False
        for peer in self._peers.values():
            if peer.due(now):
                changed |= self._connect(peer)
        if changed:
            self._update_rdy()

    def _query_lookupd(self) -> None:
        for lookupd in self.lookupd_http_addresses:
            self._log(INFO, f"querying nsqlookupd {lookupd}")
            try:
                addresses = lookup_producers(lookupd, self.topic, self.http_timeout)
            except HTTPError as err:
                self._log(ERROR, f"error querying nsqlookupd ({lookupd}) - {err}")
                continue
            for address in addresses:
                self._peers.setdefault(address, _Peer(address))

    def _connect(self, peer: _Peer) -> bool:
        self._log(INFO, f"({peer.address}) connecting to nsqd")
        conn = Connection(peer.address, timeout=self.timeout, tls_context=self.tls_context,
                          user_agent=self.user_agent)
        try:
            conn.connect()
            conn.identify(**self.identify_fields)
            conn.sub(self.topic, self.channel)
        except NSQError as err:
            conn.close()
            delay = peer.retry_later(self.max_reconnect_interval)
            self._log(ERROR, f"({peer.address}) error connecting to nsqd - {err}")
            self._log(INFO, f"({peer.address}) re-connecting in {delay:g}s")
            return False
        peer.attach(conn)
        peer.in_flight, peer.rdy, peer.close_wait = 0, 0, False
        self._by_conn[id(conn)] = peer
        self._selector.register(peer.fd, selectors.EVENT_READ, peer)
        return True

    def _update_rdy(self) -> None:
        live = self._live()
        per_conn = max(1, self.max_in_flight // max(1, len(live)))
        for peer in live:
            if peer.rdy == per_conn:
                continue
            try:
                peer.conn.rdy(per_conn)  # type: ignore[union-attr]
                peer.rdy = per_conn
            except NSQError as err:
                self._lost(peer, err)

    def _drain(self, peer: _Peer, out: list[Message]) -> None:
        """Take every frame that has arrived on ``peer``'s connection."""
        conn = peer.conn
        if conn is None:
            return
        try:
            while frames := conn.read_frames():
                for frame in frames:
                    if isinstance(frame, Message):
                        peer.in_flight += 1
                        out.append(frame)
                    elif isinstance(frame, Response):
                        if frame.data == CLOSE_WAIT:
                            self._log(INFO, f"({peer.address}) received CLOSE_WAIT from nsqd")
                            peer.close_wait = True
                    else:
                        self._log(ERROR, f"({peer.address}) protocol error - {frame}")
        except NSQError as err:
            self._lost(peer, err)

    def _send(self, msg: Message, send: Callable[[Connection], None], *, settles: bool) -> bool:
        """Send a FIN/REQ/TOUCH on the connection the message came from, if that connection still lives."""
        peer = self._by_conn.get(id(msg.conn))
        if peer is None or peer.conn is not msg.conn:
            return False
        try:
            send(peer.conn)
        except NSQError as err:
            self._lost(peer, err)
            return False
        if settles:
            peer.in_flight -= 1
        return True

    def _lost(self, peer: _Peer, err: Exception) -> None:
        if self.stopping and peer.close_wait:
            self._log(INFO, f"({peer.address}) connection closed")
        else:
            self._log(WARN, f"({peer.address}) connection lost - {err}")
        self._disconnect(peer)
        peer.retry_later(self.max_reconnect_interval)
        if not self.stopping:
            self._update_rdy()

    def _disconnect(self, peer: _Peer) -> None:
        fd = peer.fd
        conn = peer.detach()
        if conn is None:
            return
        self._by_conn.pop(id(conn), None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fd)
        conn.close()
        peer.in_flight = 0
        peer.rdy = 0
