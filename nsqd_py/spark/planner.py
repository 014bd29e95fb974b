"""The driver's half of an executor-mode read: what each channel holds, and how a micro-batch splits it into slices.

The driver never subscribes. Each trigger it surveys every nsqd that has a subscribed topic (from the configured
addresses or lookupd), all at once with one overall timeout, reading `/stats` and creating the channel where it does
not exist yet (as a first SUB would, so that messages published from now on are kept for it). It splits the batch's
row quota over the channels by depth, never past a channel's depth, rotating the odd rows by batch number so that no
channel starves, and the partitions over the channels by their share.

nsqd's `message_count` of a channel counts the messages put into it (published, or moved in from the topic's queue),
never a requeue or a timeout, in Go's nsqd and in ours alike: so the messages still pending from before a snapshot are
what is pending now less what entered since (`backlog_before`), which is how availableNow knows when it is done.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..client.connection import split_address
from ..client.errors import HTTPError
from ..go.gocompat import join_host_port
from . import nsqd_http
from .connect import ConnectionConfigError
from .discovery import lookup_nodes, parallel
from .options import ConnectOptions, OptionError, ReadOptions
from .slices import SliceSpec

T = TypeVar("T")

log = logging.getLogger(__name__)


class UnreachableError(ConnectionError):
    """An nsqd or lookupd did not answer, and failOnUnreachable (or availableNow) asks to fail rather than skip it."""


@dataclass(frozen=True)
class ChannelState:
    """One topic's channel on one nsqd, as its `/stats` show it."""

    topic: str
    nsqd: str
    depth: int
    in_flight: int = 0
    deferred: int = 0
    requeued: int = 0
    #: messages put into the channel since nsqd started (a requeue is not counted)
    message_count: int = 0
    #: messages still in the topic's own queue (no channel yet, or a paused topic): every channel gets them
    topic_depth: int = 0
    #: the channel is paused: nsqd delivers none of its messages
    paused: bool = False
    #: the topic is paused: its own queue (`topic_depth`) moves into no channel
    topic_paused: bool = False
    #: nsqd's start_time: after a restart message_count counts from 0 again
    started: int = 0
    http: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[str, str]:
        return self.topic, self.nsqd

    @property
    def readable(self) -> int:
        """What a task can be given now."""
        return 0 if self.paused else self.depth + self._moving_in

    @property
    def deliverable(self) -> int:
        """What nsqd delivers now or later (in flight elsewhere and deferred come back) unless a pause is lifted."""
        return 0 if self.paused else self.depth + self.in_flight + self.deferred + self._moving_in

    @property
    def _moving_in(self) -> int:
        """The topic's queue, which moves into the channel unless the topic is paused."""
        return 0 if self.topic_paused else self.topic_depth

    @property
    def pending(self) -> int:
        return self.depth + self.in_flight + self.deferred + self.topic_depth

    @property
    def entered(self) -> int:
        """Messages in the channel so far, counting those in the topic's queue, which will move in."""
        return self.message_count + self.topic_depth

    def progress(self) -> dict[str, int]:
        return {"depth": self.depth, "inFlight": self.in_flight, "deferred": self.deferred,
                "requeued": self.requeued}


def backlog_before(snapshot: ChannelState, now: ChannelState) -> int:
    """Messages of ``snapshot`` still pending ``now``: pending less what entered since. A count that went back (nsqd
    restarted, or the channel was deleted and made again) counts from 0."""
    restarted = now.started != snapshot.started or now.entered < snapshot.entered
    arrived = now.entered - (0 if restarted else snapshot.entered)
    return max(0, now.pending - arrived)


@dataclass(frozen=True)
class Survey:
    """Every reachable channel's state, and the nsqd (TCP) and lookupd addresses that did not answer."""

    states: list[ChannelState]
    unreachable: list[str]


@dataclass(frozen=True)
class _Node:
    tcp: str
    http: str
    #: the HTTP address is the TCP port + 1, not one the user gave
    guessed: bool = False


def survey(opts: ReadOptions, strict: bool) -> Survey:
    """Every nsqd's state of the channel for each subscribed topic (see ask_every_nsqd)."""
    found, unreachable = ask_every_nsqd(opts, strict, _node_call)
    return Survey(sorted(found, key=lambda s: s.key), sorted(unreachable))


def ask_every_nsqd(opts: ReadOptions, strict: bool, node_call: Callable[..., Callable[[], list[T]]],
                   ) -> tuple[list[T], dict[str, str]]:
    """``node_call(node, its topics or None for the pattern's, the pattern, opts, timeouts)``'s answers of every nsqd
    of the subscription, asked all at once within connect_timeout, and the nsqd that did not answer. One that does
    not answer is skipped with a warning, or (``strict``) raises UnreachableError; an nsqd whose TCP port answers
    but whose guessed HTTP port does not raises OptionError, and one that refuses the TLS settings (or needs `tls`)
    raises ConnectionConfigError (or OptionError): the HTTP calls use the reads' TLS settings (nsqd_http.py)."""
    deadline = time.monotonic() + opts.connect.connect_timeout
    timeout = (min(2.0, opts.connect.connect_timeout), opts.connect.connect_timeout)
    pattern = re.compile(opts.subscribe_pattern) if opts.subscribe_pattern else None
    targets, unreachable = _targets(opts, pattern, deadline, timeout)
    calls = {node: node_call(node, topics, pattern, opts, timeout) for node, topics in targets.items()}
    answers, errors = parallel(calls, deadline)
    for node, err in errors.items():
        if isinstance(err, OptionError | ConnectionConfigError):  # no trigger fixes it: fail the query now
            raise err
        unreachable[node.tcp] = f"nsqd {node.tcp} (HTTP {node.http}): {err}"
    if unreachable:
        _unreachable(unreachable, strict)
    return [item for found in answers.values() for item in found], unreachable


def _unreachable(errors: dict[str, str], strict: bool) -> None:
    text = "; ".join(sorted(errors.values()))
    if strict:
        raise UnreachableError(f"cannot be reached: {text}")
    log.warning("skipped until they answer: %s", text)


def _targets(opts: ReadOptions, pattern: re.Pattern[str] | None, deadline: float, timeout: tuple[float, float],
             ) -> tuple[dict[_Node, set[str] | None], dict[str, str]]:
    """The nsqd to ask, each with its topics (None: those of its own that match the pattern), and the lookupds that
    did not answer."""
    connect = opts.connect
    if connect.lookupd_http_addresses:
        found, failed = lookup_nodes(connect.lookupd_http_addresses, opts.topics, pattern, deadline, timeout)
        nodes: dict[_Node, set[str] | None] = {_Node(tcp, http): topics for (tcp, http), topics in found.items()}
        return nodes, {lookupd: f"lookupd {lookupd}: {err}" for lookupd, err in failed.items()}
    given = connect.nsqd_http_addresses
    http = given or tuple(_next_port(a) for a in connect.nsqd_tcp_addresses)
    wanted = None if pattern is not None else set(opts.topics)
    return {_Node(tcp, address, not given): wanted
            for tcp, address in zip(connect.nsqd_tcp_addresses, http, strict=True)}, {}


def _next_port(tcp_address: str) -> str:
    target = split_address(tcp_address)
    if isinstance(target, str):
        raise OptionError(f"nsqd {tcp_address} is a unix socket: give its HTTP address in 'nsqdHttpAddresses'")
    return join_host_port(target[0], target[1] + 1)


def _node_call(node: _Node, topics: set[str] | None, pattern: re.Pattern[str] | None, opts: ReadOptions,
               timeout: tuple[float, float]) -> Callable[[], list[ChannelState]]:
    def ask() -> list[ChannelState]:
        try:
            return _node_states(node, topics, pattern, opts, timeout)
        except HTTPError:
            if node.guessed and _answers_tcp(node.tcp, timeout[0]):
                raise OptionError(f"nsqd {node.tcp} answers on TCP but not on HTTP at {node.http} (its TCP port + 1): "
                                  f"give its HTTP address in 'nsqdHttpAddresses'") from None
            raise
    return ask


def _answers_tcp(address: str, timeout: float) -> bool:
    """Something listens on the (host, port) address: a guessed HTTP port that fails is then the wrong one."""
    target = split_address(address)
    assert not isinstance(target, str)  # a unix socket has no guessed HTTP address
    try:
        socket.create_connection(target, timeout).close()
    except OSError:
        return False
    return True


def _node_states(node: _Node, topics: set[str] | None, pattern: re.Pattern[str] | None, opts: ReadOptions,
                 timeout: tuple[float, float]) -> list[ChannelState]:
    """One `/stats` of the node (of the one topic, when only one is wanted), creating missing topics and channels."""
    params = {"format": "json", "include_clients": "false"}
    if topics is not None and len(topics) == 1:
        params["topic"] = next(iter(topics))
    stats = nsqd_http.get_json(node.http, "/stats", params, opts.connect, timeout)
    found = {t["topic_name"]: t for t in stats.get("topics") or []}
    if topics is None:
        assert pattern is not None
        topics = {name for name in found if pattern.fullmatch(name)}
    started = int(stats.get("start_time") or 0)
    return [_channel_state(node, topic, opts, found.get(topic), started, timeout) for topic in sorted(topics)]


def _channel_state(node: _Node, topic: str, opts: ReadOptions, stats: dict[str, Any] | None, started: int,
                   timeout: tuple[float, float]) -> ChannelState:
    """The channel's state; a new channel inherits what waits in its topic's queue (those count as already there)."""
    channel = opts.channel
    if stats is None:
        nsqd_http.post(node.http, "/topic/create", {"topic": topic}, opts.connect, timeout)
        stats = {}
    topic_depth, topic_paused = int(stats.get("depth", 0)), bool(stats.get("paused"))
    for chan in stats.get("channels") or []:
        if chan.get("channel_name") == channel:
            return ChannelState(topic, node.tcp, int(chan["depth"]), int(chan["in_flight_count"]),
                                int(chan["deferred_count"]), int(chan["requeue_count"]), int(chan["message_count"]),
                                topic_depth, bool(chan.get("paused")), topic_paused, started, node.http)
    nsqd_http.post(node.http, "/channel/create", {"topic": topic, "channel": channel}, opts.connect, timeout)
    return ChannelState(topic, node.tcp, 0, topic_depth=topic_depth, topic_paused=topic_paused, started=started,
                        http=node.http)


def skip_backlog(opts: ReadOptions) -> None:
    """startingOffsets=latest: empty the channel on every nsqd (creating it first), so that a new query reads only
    what is published from now on. A new channel's topic backlog moves in after the channel is made: it is emptied
    again until the topics' queues are empty too (within connect_timeout)."""
    if opts.starting_offsets != "latest":
        return
    deadline = time.monotonic() + opts.connect.connect_timeout
    timeout = (min(2.0, opts.connect.connect_timeout), opts.connect.connect_timeout)
    while True:
        states = survey(opts, opts.fail_on_unreachable).states
        calls = {s.key: _empty_call(s, opts.channel, opts.connect, timeout) for s in states}
        _, errors = parallel(calls, deadline)
        if errors:
            _unreachable({nsqd: f"nsqd {nsqd}: {err}" for (_, nsqd), err in errors.items()}, opts.fail_on_unreachable)
        moving = [s for s in states if s.topic_depth and not s.topic_paused]  # a paused topic's queue stays
        if not moving or time.monotonic() >= deadline:
            log.info("startingOffsets=latest: emptied channel %s on %d nsqd channels", opts.channel, len(states))
            return
        time.sleep(0.05)


def _empty_call(state: ChannelState, channel: str, connect: ConnectOptions,
                timeout: tuple[float, float]) -> Callable[[], None]:
    params = {"topic": state.topic, "channel": channel}
    return lambda: nsqd_http.post(state.http, "/channel/empty", params, connect, timeout)


def default_partitions() -> int:
    """Partitions per batch without minPartitions: the cores of the machine Spark plans on. A Python data source
    cannot ask Spark for its parallelism (its reader runs in a Python worker with no SparkContext); in local mode
    (`local[*]`) this is that parallelism, on a cluster set minPartitions to the executors' cores."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _apportion(total: int, weights: list[int], turn: int) -> list[int]:
    """``total`` split in proportion to ``weights`` by largest remainder (exact integers). Equal remainders go first
    to the entries from ``turn`` on (mod len), so that the batch number rotates who gets the odd one. When ``total``
    is at most ``sum(weights)`` no entry gets more than its weight."""
    weight = sum(weights)
    if weight <= 0 or total <= 0:
        return [0] * len(weights)
    parts = [divmod(total * w, weight) for w in weights]
    shares = [whole for whole, _ in parts]
    count = len(weights)
    order = sorted(range(count), key=lambda i: (-parts[i][1], (i - turn) % count))
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _rows(depths: list[int], total: int, batch: int) -> list[int]:
    """Rows per channel: one each and the rest by depth; when there are fewer rows than channels, one each for a
    window of channels that moves on with the batch number (so that none starves)."""
    count = len(depths)
    if total < count:
        first = batch * total % count
        chosen = {(first + i) % count for i in range(total)}
        return [1 if i in chosen else 0 for i in range(count)]
    return [1 + extra for extra in _apportion(total - count, [d - 1 for d in depths], batch)]


def plan_slices(states: list[ChannelState], max_rows: int | None, max_bytes: int | None,
                min_partitions: int | None, batch: int = 0) -> list[SliceSpec]:
    """Split batch ``batch``: rows over the channels (never more than one holds), partitions by share (at least
    one per channel with rows, at most one per row), then each channel's rows evenly over its partitions."""
    holding = sorted((s for s in states if s.readable > 0), key=lambda s: s.key)
    available = sum(s.readable for s in holding)
    total = available if max_rows is None else min(max_rows, available)
    rows = _rows([s.readable for s in holding], total, batch)
    reading = [(state, share) for state, share in zip(holding, rows, strict=True) if share > 0]
    count = min(max(min_partitions or 0, len(reading)), total)
    extra = _apportion(count - len(reading), [share - 1 for _, share in reading], batch)
    specs = []
    for (state, share), more in zip(reading, extra, strict=True):
        for index, quota in enumerate(_apportion(share, [1] * (1 + more), batch)):
            byte_quota = max(1, max_bytes * quota // total) if max_bytes else 0
            specs.append(SliceSpec(state.topic, state.nsqd, index, quota, byte_quota))
    return specs
