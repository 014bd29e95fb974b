"""One stats snapshot of the broker (nsqd's `GetStats` + `getMemStats`), shared by /stats, statsd and metrics.

`snapshot()` returns plain dicts and lists already in the exact shape, key order and null-versus-[] quirks of
nsqd's `/stats?format=json`, so the JSON renderer only serialises it and the text renderer reads the same
fields. Topics and channels are sorted by name; clients come in subscription order and producers in connection
order (nsqd's are in Go map order).

Quirks kept on purpose (all seen in real nsqd output):
* `topic=` naming an unknown topic gives `topics: null` *and* `producers: null`; `channel=` drops topics that
  lack that channel; an empty broker gives `topics: []`.
* `include_clients=false` gives each channel `clients: null` (its `client_count` stays) and `producers: null`;
  a channel without clients has `clients: []`; no producers at all is `producers: null`.
* A client's `pub_counts` holds at most one entry (nsqd stops after the first map entry), restricted to the
  `topic=` filter when one is given, and is left out when empty, like `authed`/`auth_identity*` when unset.
* `memory` is left out entirely when `include_mem=false`.
"""

from __future__ import annotations

import gc
import math
import os
import resource
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..config.queue_settings import CHANNEL, TOPIC
from ..runtime.version import NSQ_VERSION
from .e2e import merged_result

if TYPE_CHECKING:
    from .channel import Channel
    from .nsqd import NSQD
    from .topic import Topic

Stats = dict[str, Any]


#: a front door's row for one of its clients (`describe(client, topic_filter)`): core/ does not know their fields
DescribeClient = Callable[[Any, str], Stats]


def snapshot(nsqd: NSQD, topic: str = "", channel: str = "", describe_client: DescribeClient | None = None,
             include_mem: bool = True) -> Stats:
    """The `/stats?format=json` document: version, health, start_time, topics, [memory], producers.
    Without ``describe_client`` clients are left out (nsqd's `include_clients=false`).

    The collector is off meanwhile: the document is fresh dicts and lists without a cycle among them (tens of
    thousands with many channels), which only triggered collections of the whole heap (a third of the time)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _snapshot(nsqd, topic, channel, describe_client, include_mem)
    finally:
        if collecting:
            gc.enable()


def _snapshot(nsqd: NSQD, topic: str, channel: str, describe_client: DescribeClient | None,
              include_mem: bool) -> Stats:
    topics, producers = _topics_and_producers(nsqd, topic, channel, describe_client)
    stats: Stats = {"version": NSQ_VERSION, "health": nsqd.health(), "start_time": nsqd.start_time,
                    "topics": topics}
    if include_mem:
        stats["memory"] = memory_stats()
    stats["producers"] = producers
    return stats


def _topics_and_producers(nsqd: NSQD, topic_filter: str, channel_filter: str,
                          describe: DescribeClient | None) -> tuple[list[Stats] | None, list[Stats] | None]:
    if topic_filter:
        found = nsqd.topics.get(topic_filter)
        if found is None:
            return None, None  # nsqd returns before it even looks at producers
        topics = [found]
    else:
        topics = sorted(nsqd.topics.values(), key=lambda t: t.name)
    quantiles = nsqd.opts.e2e_processing_latency_percentiles
    rows = []
    for t in topics:
        if channel_filter:
            picked = t.channels.get(channel_filter)
            if picked is None:
                continue
            channels = [picked]
        else:
            channels = sorted(t.channels.values(), key=lambda c: c.name)
        channel_rows = [channel_stats(c, quantiles, topic_filter, describe) for c in channels]
        rows.append(topic_stats(t, channel_rows, quantiles))
    producers = None
    if describe is not None:  # producers: the clients that have published
        producers = [describe(c, topic_filter) for c in nsqd.clients.values() if c.pub_counts] or None
    return rows, producers


def topic_stats(topic: Topic, channel_rows: list[Stats], quantiles: Sequence[float]) -> Stats:
    return _with_settings(topic, TOPIC, {
        "topic_name": topic.name,
        "channels": channel_rows,
        "depth": topic.depth(),
        "backend_depth": topic.backend_depth(),
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": topic_e2e_latency(topic.channels.values(), quantiles),
    })


def channel_stats(channel: Channel, quantiles: Sequence[float], topic_filter: str = "",
                  describe: DescribeClient | None = None) -> Stats:
    """One channel row; with topology-aware consumption also nsqd master's zone/region/global counts."""
    clients = channel.clients
    return _with_settings(channel, CHANNEL, {
        "channel_name": channel.name,
        "depth": channel.depth(),
        "backend_depth": channel.backend_depth(),
        "in_flight_count": channel.in_flight_count(),
        "deferred_count": channel.deferred_count(),
        "message_count": channel.message_count,
        **_topology_counts(channel),
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": len(clients),
        "clients": [describe(c, topic_filter) for c in clients] if describe is not None else None,
        "paused": channel.paused,
        "e2e_processing_latency": channel_e2e_latency(channel, quantiles),
    })


def _topology_counts(channel: Channel) -> Stats:
    """nsqd master's topology counters, each left out while 0 (`omitempty`): so always, without the experiment."""
    counts = (("zone_local_msg_count", channel.zone_local_msg_count),
              ("region_local_msg_count", channel.region_local_msg_count),
              ("global_msg_count", channel.global_msg_count))
    return {key: value for key, value in counts if value}


def _with_settings(queue: Topic | Channel, scope: str, row: Stats) -> Stats:
    """A row with the controls beyond nsqd on there: their counters (the queue's attributes of those names),
    then `"settings"`; no key when none is on, so the row is nsqd 1.3.0's."""
    in_force = queue.settings.in_force(scope)
    if in_force:
        for counter in queue.settings.counters(scope):
            row[counter] = getattr(queue, counter)
        row["settings"] = in_force
    return row


# ---- end-to-end processing latency ----------------------------------------------------------------------------

_E2E_OFF: Stats = {"count": 0, "percentiles": None}


def channel_e2e_latency(channel: Channel, quantiles: Sequence[float]) -> Stats:
    """nsqd samples `now - publish time` at every FIN into a sliding window per channel (core/e2e.py).
    Without configured percentiles there is no window: `{"count":0,"percentiles":null}`."""
    window = channel.e2e_latency
    if window is None or not quantiles:
        return _E2E_OFF
    return e2e_result(*window.result(quantiles))


def topic_e2e_latency(channels: Iterable[Channel], quantiles: Sequence[float]) -> Stats:
    """nsqd merges the windows of all the topic's channels (also those a `channel=` filter hides);
    a topic without channels (or without percentiles) has none."""
    windows = [c.e2e_latency for c in channels if c.e2e_latency is not None]
    if not quantiles or not windows:
        return _E2E_OFF
    return e2e_result(*merged_result(windows, quantiles))


def e2e_result(count: int, values: Iterable[tuple[float, float]]) -> Stats:
    """quantile.Result's JSON: each entry is a Go map, so its keys come sorted (`quantile`, `value`)."""
    return {"count": count,
            "percentiles": [{"quantile": go_float(q), "value": go_float(v)} for q, v in values]}


def go_float(value: float) -> float | int:
    """Go's JSON writes a whole float64 without a fraction (`1`, `53392450`); orjson would write `1.0`."""
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


# ---- memory -------------------------------------------------------------------------------------------------


class _GCPauses:
    """The last 256 collection pauses in ns, like Go's `MemStats.PauseNs` ring (a gc.callbacks hook)."""

    def __init__(self) -> None:
        self.pauses: deque[int] = deque(maxlen=256)
        self._started = 0

    def __call__(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        else:
            self.pauses.append(time.perf_counter_ns() - self._started)


_GC_PAUSES = _GCPauses()
gc.callbacks.append(_GC_PAUSES)  # from import on, so the first /stats already has a history
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def memory_stats() -> Stats:
    """nsqd's nine Go runtime numbers, mapped to the nearest thing CPython has:

    * `heap_objects`: `sys.getallocatedblocks()`, the memory blocks the interpreter has allocated
      (Go: live heap objects).
    * `heap_in_use_bytes`: the resident set size now (`/proc/self/statm`; peak RSS where /proc is missing).
    * `heap_idle_bytes` and `heap_released_bytes`: peak RSS minus current RSS, memory the process held once
      and has given back (Go: idle spans, and the part of them returned to the OS).
    * `gc_pause_usec_100/99/95`: those percentiles, in µs, of the last 256 collections as timed by a
      `gc.callbacks` hook, picked the way nsqd's `percentile()` picks them.
    * `next_gc_bytes`: allocations left before the next generation-0 collection. CPython triggers
      collections by allocation count, not bytes, so this is a count (Go: heap size goal of the next GC).
    * `gc_total_runs`: collections of all generations since start (Go: `NumGC`).
    """
    rss, peak = _resident_bytes()
    pauses = sorted(_GC_PAUSES.pauses)
    threshold = gc.get_threshold()[0]
    pending = gc.get_count()[0]
    return {
        "heap_objects": sys.getallocatedblocks(),
        "heap_idle_bytes": max(peak - rss, 0),
        "heap_in_use_bytes": rss,
        "heap_released_bytes": max(peak - rss, 0),
        "gc_pause_usec_100": _percentile(100.0, pauses) // 1000,
        "gc_pause_usec_99": _percentile(99.0, pauses) // 1000,
        "gc_pause_usec_95": _percentile(95.0, pauses) // 1000,
        "next_gc_bytes": max(threshold - pending, 0),
        "gc_total_runs": sum(generation["collections"] for generation in gc.get_stats()),
    }


def _resident_bytes() -> tuple[int, int]:
    """(current RSS, peak RSS) in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak *= 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
    try:
        with open("/proc/self/statm", "rb") as f:
            rss = int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        rss = peak
    return rss, max(peak, rss)


def _percentile(perc: float, ordered: Sequence[int]) -> int:
    """nsqd's `percentile()`: index floor(perc% * n + 0.5), capped at the last element; 0 when empty."""
    if not ordered:
        return 0
    index = min(math.floor(perc / 100.0 * len(ordered) + 0.5), len(ordered) - 1)
    return ordered[index]
