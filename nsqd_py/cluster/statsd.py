"""Pushing stats to statsd (nsqd's statsdLoop) every --statsd-interval.

Each push reads one stats snapshot (core/stats, no clients) and sends UDP lines `<prefix><key>:<n>|c` (counters:
the change since the previous push) or `|g` (gauges), each ending in `\\n`, packed into datagrams of at most
--statsd-udp-packet-size bytes (a single longer line goes alone) and spread evenly over the interval minus one
second. `<prefix>` is --statsd-prefix as already expanded (`nsq.<host>_<port>.`). Keys:

* `topic.<t>.{message_count,message_bytes}|c`, `topic.<t>.{depth,backend_depth}|g`,
  `topic.<t>.e2e_processing_latency_<p>|g` (`<p>` = quantile * 100, rounded);
* `topic.<t>.channel.<c>.{message_count,requeue_count,timeout_count}|c`,
  `topic.<t>.channel.<c>.{depth,backend_depth,in_flight_count,deferred_count,clients}|g` and its e2e gauges;
* with --statsd-mem-stats: `mem.{heap_objects,heap_idle_bytes,heap_in_use_bytes,heap_released_bytes,
  gc_pause_usec_100,gc_pause_usec_99,gc_pause_usec_95,next_gc_bytes}|g` and `mem.gc_runs|c`, from the
  CPython numbers core/stats.memory_stats() maps onto Go's.

--statsd-exclude-ephemeral leaves out `#ephemeral` topics and channels.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import gevent
from gevent.event import Event

from ..config.queue_settings import counters_of
from ..core import stats
from ..runtime.listen import split_host_port

if TYPE_CHECKING:
    from ..core.nsqd import NSQD

_MEM_GAUGES = ("heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes", "gc_pause_usec_100",
               "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes")
_EPHEMERAL = "#ephemeral"


class StatsdPusher:
    """The statsd loop of one nsqd; does nothing unless --statsd-address is set."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self._last: stats.Stats = {"topics": []}
        self._exit = Event()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self.nsqd.opts.statsd_address:
            self._greenlet = gevent.spawn(self._run)

    def close(self) -> None:
        """Stop; a push in progress sends the rest of its packets without waiting between them."""
        if self._greenlet is None:
            return
        self._exit.set()
        self._greenlet.join(timeout=5)
        self.nsqd.logger.info("STATSD: closing")

    def _run(self) -> None:
        interval = self.nsqd.opts.statsd_interval / 1e9
        while not self._exit.wait(interval):
            self.push()

    def push(self) -> None:
        opts, log = self.nsqd.opts, self.nsqd.logger
        address = opts.statsd_address
        try:
            sock = _udp_socket(address)
        except (OSError, ValueError):
            log.error(f"failed to create UDP socket to statsd({address})")
            return
        log.info(f"STATSD: pushing stats to {address}")
        with sock:
            current = stats.snapshot(self.nsqd, include_mem=opts.statsd_mem_stats)
            lines = stat_lines(current, self._last, opts.statsd_prefix, opts.statsd_exclude_ephemeral)
            self._last = current
            packets = pack(lines, opts.statsd_udp_packet_size)
            pause = max(opts.statsd_interval / 1e9 - 1.0, 0.0) / max(len(packets), 1)
            for packet in packets:
                with contextlib.suppress(OSError):  # nsqd ignores write errors (e.g. nothing listening yet)
                    sock.send(packet)
                self._exit.wait(pause)


def _udp_socket(address: str) -> socket.socket:
    host, port = split_host_port(address)
    family, kind, proto, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.connect(sockaddr)
    except OSError:
        sock.close()
        raise
    return sock


def stat_lines(current: stats.Stats, last: stats.Stats, prefix: str, exclude_ephemeral: bool) -> list[str]:
    """Every statsd line of one push, in nsqd's order; counters are deltas against ``last``."""
    return [f"{prefix}{key}:{int(value)}|{kind}\n"
            for key, value, kind in _stats(current, last, exclude_ephemeral)]


#: (stats field, statsd name, counter?) in nsqd's order; a counter is sent as the change since the last push
_TOPIC_STATS = (("message_count", "message_count", True), ("message_bytes", "message_bytes", True),
                ("depth", "depth", False), ("backend_depth", "backend_depth", False))
_CHANNEL_STATS = (("message_count", "message_count", True), ("depth", "depth", False),
                  ("backend_depth", "backend_depth", False), ("in_flight_count", "in_flight_count", False),
                  ("deferred_count", "deferred_count", False), ("requeue_count", "requeue_count", True),
                  ("timeout_count", "timeout_count", True), ("client_count", "clients", False))


def _stats(current: stats.Stats, last: stats.Stats, exclude_ephemeral: bool) -> Iterator[tuple[str, Any, str]]:
    last_topics = {t["topic_name"]: t for t in last.get("topics") or []}
    for topic in current.get("topics") or []:
        name = topic["topic_name"]
        if exclude_ephemeral and name.endswith(_EPHEMERAL):
            continue
        before = last_topics.get(name, {})
        key = f"topic.{name}"
        yield from _fields(key, _TOPIC_STATS, topic, before)
        yield from _e2e(key, topic["e2e_processing_latency"])
        yield from _controls(key, topic, before)
        last_channels = {c["channel_name"]: c for c in before.get("channels") or []}
        for channel in topic["channels"]:
            cname = channel["channel_name"]
            if exclude_ephemeral and cname.endswith(_EPHEMERAL):
                continue
            ckey = f"{key}.channel.{cname}"
            yield from _fields(ckey, _CHANNEL_STATS, channel, last_channels.get(cname, {}))
            yield from _e2e(ckey, channel["e2e_processing_latency"])
            yield from _controls(ckey, channel, last_channels.get(cname, {}))
    memory = current.get("memory")
    if memory is not None:
        for name in _MEM_GAUGES:
            yield f"mem.{name}", memory[name], "g"
        yield "mem.gc_runs", memory["gc_total_runs"] - (last.get("memory") or {}).get("gc_total_runs", 0), "c"


def _fields(key: str, table: tuple[tuple[str, str, bool], ...], now: stats.Stats,
            before: stats.Stats) -> Iterator[tuple[str, Any, str]]:
    for field, name, counter in table:
        if counter:
            yield f"{key}.{name}", now[field] - before.get(field, 0), "c"
        else:
            yield f"{key}.{name}", now[field], "g"


def _controls(key: str, now: stats.Stats, before: stats.Stats) -> Iterator[tuple[str, Any, str]]:
    """The controls beyond nsqd where they are on: their counters (`.dropped_count|c`) and numeric settings
    (`.max_channel_depth|g`); nothing where none is, as nsqd sends."""
    settings = now.get("settings")
    if not settings:
        return
    for counter in counters_of(now):
        yield f"{key}.{counter}", now[counter] - before.get(counter, 0), "c"
    for name, value in settings.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            yield f"{key}.{name}", value, "g"


def _e2e(key: str, latency: stats.Stats) -> Iterator[tuple[str, Any, str]]:
    for item in latency["percentiles"] or []:
        yield f"{key}.e2e_processing_latency_{item['quantile'] * 100:.0f}", item["value"], "g"


def pack(lines: list[str], size: int) -> list[bytes]:
    """nsqd's boundary-buffered writer: whole lines into datagrams of at most ``size`` bytes."""
    packets: list[bytes] = []
    buf = b""
    for line in lines:
        data = line.encode()
        if buf and len(buf) + len(data) > size:
            packets.append(buf)
            buf = b""
        if len(data) >= size:
            packets.append(data)  # Go's bufio writes an oversized line straight through
        else:
            buf += data
    if buf:
        packets.append(buf)
    return packets
