"""The driver's half of an executor-mode read: what each channel holds, and how a micro-batch splits it into slices.

The driver never subscribes. Each trigger it reads `/stats` of every nsqd that has a subscribed topic (from the
configured addresses or lookupd), creating the channel where it does not exist yet (as a first SUB would, so that
messages published from now on are kept for it), and splits the batch's row quota over the nsqd by channel depth and
over partitions within each nsqd.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import requests

from ..client.connection import split_address
from ..client.errors import HTTPError
from ..client.http import DEFAULT_TIMEOUT, endpoint, nsqd_stats
from ..go.gocompat import join_host_port
from .discovery import topic_nodes
from .options import ConnectOptions, OptionError

log = logging.getLogger(__name__)


class UnreachableError(ConnectionError):
    """An nsqd did not answer, and failOnUnreachable asks to fail rather than wait for it."""


@dataclass(frozen=True)
class ChannelState:
    """One topic's channel on one nsqd, as its `/stats` show it."""

    topic: str
    nsqd: str
    depth: int
    in_flight: int = 0
    deferred: int = 0
    requeued: int = 0

    def progress(self) -> dict[str, int]:
        return {"depth": self.depth, "inFlight": self.in_flight, "deferred": self.deferred,
                "requeued": self.requeued}


def nodes(connect: ConnectOptions, topic: str) -> list[tuple[str, str]]:
    """(TCP, HTTP) address of every nsqd to read ``topic`` from; without nsqd_http_addresses the HTTP port is the
    TCP port + 1 (nsqd's 4150/4151)."""
    if connect.lookupd_http_addresses:
        return sorted(topic_nodes(connect.lookupd_http_addresses, topic))
    http = connect.nsqd_http_addresses or tuple(_next_port(a) for a in connect.nsqd_tcp_addresses)
    return list(zip(connect.nsqd_tcp_addresses, http, strict=True))


def _next_port(tcp_address: str) -> str:
    target = split_address(tcp_address)
    if isinstance(target, str):
        raise OptionError(f"nsqd {tcp_address} is a unix socket: give its HTTP address in 'nsqd_http_addresses'")
    return join_host_port(target[0], target[1] + 1)


def channel_state(tcp: str, http: str, topic: str, channel: str) -> ChannelState:
    """Raises HTTPError when nsqd cannot be asked."""
    stats = nsqd_stats(http, topic, channel, include_clients=False)
    for found in stats.get("topics") or []:
        if found.get("topic_name") != topic:
            continue
        for chan in found.get("channels") or []:
            if chan.get("channel_name") == channel:
                return ChannelState(topic, tcp, int(chan["depth"]), int(chan["in_flight_count"]),
                                    int(chan["deferred_count"]), int(chan["requeue_count"]))
        _post(http, "/channel/create", topic, channel)
        return ChannelState(topic, tcp, int(found.get("depth", 0)))  # moves to the new channel
    _post(http, "/topic/create", topic)
    _post(http, "/channel/create", topic, channel)
    return ChannelState(topic, tcp, 0)


def _post(http: str, path: str, topic: str, channel: str = "") -> None:
    url = endpoint(http, path)
    params = {"topic": topic, "channel": channel} if channel else {"topic": topic}
    try:
        resp = requests.post(url, params=params, timeout=DEFAULT_TIMEOUT)
    except requests.RequestException as err:
        raise HTTPError(f"POST {url} failed - {err}") from err
    if resp.status_code != 200:
        raise HTTPError(f"POST {resp.url} got status {resp.status_code}: {resp.text.strip()}", resp.status_code)


def survey(connect: ConnectOptions, topics: tuple[str, ...], channel: str, strict: bool) -> list[ChannelState]:
    """Every reachable nsqd's state of ``channel`` for each topic; an unreachable one is skipped with a warning, or
    (``strict``) raises UnreachableError."""
    states = []
    for topic in topics:
        for tcp, http in nodes(connect, topic):
            try:
                states.append(channel_state(tcp, http, topic, channel))
            except HTTPError as err:
                if strict:
                    raise UnreachableError(f"nsqd {tcp} (HTTP {http}) cannot be reached: {err}") from err
                log.warning("nsqd %s (HTTP %s) cannot be reached, reading the others: %s", tcp, http, err)
    return states


def _shares(total: int, weights: list[int], minimum: int = 0) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder), each at least ``minimum``."""
    weight = sum(weights)
    if weight <= 0:
        return [0] * len(weights)
    exact = [total * w / weight for w in weights]
    shares = [max(minimum, int(x)) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in by_remainder[: max(0, total - sum(shares))]:
        shares[i] += 1
    while sum(shares) > total and max(shares) > minimum:  # the minimums overshot: the largest give back
        shares[shares.index(max(shares))] -= 1
    return shares


@dataclass(frozen=True)
class SliceSpec:
    """One partition of a micro-batch: ``quota`` rows (and ``byte_quota`` body bytes, 0 = any) of ``topic``
    from ``nsqd``."""

    topic: str
    nsqd: str
    index: int
    quota: int
    byte_quota: int = 0

    def encode(self) -> list[str | int]:
        return [self.topic, self.nsqd, self.index, self.quota, self.byte_quota]

    @classmethod
    def decode(cls, raw: list) -> SliceSpec:
        topic, nsqd, index, quota, byte_quota = raw
        return cls(str(topic), str(nsqd), int(index), int(quota), int(byte_quota))


def plan_slices(states: list[ChannelState], max_rows: int | None, max_bytes: int | None,
                min_partitions: int | None) -> list[SliceSpec]:
    """Split the batch: rows by channel depth over the nsqd, partitions by share (at least one per nsqd with rows),
    then each nsqd's rows evenly over its partitions."""
    holding = [s for s in states if s.depth > 0]
    available = sum(s.depth for s in holding)
    total = available if max_rows is None else min(max_rows, available)
    rows = _shares(total, [s.depth for s in holding], minimum=1 if total >= len(holding) else 0)
    reading = [(state, share) for state, share in zip(holding, rows, strict=True) if share > 0]
    count = max(min_partitions or 0, len(reading))
    partitions = _shares(count, [share for _, share in reading], minimum=1)
    specs = []
    for (state, share), parts in zip(reading, partitions, strict=True):
        parts = min(parts, share)
        for index, quota in enumerate(_shares(share, [1] * parts)):
            byte_quota = max(1, max_bytes * quota // total) if max_bytes else 0
            specs.append(SliceSpec(state.topic, state.nsqd, index, quota, byte_quota))
    return specs
