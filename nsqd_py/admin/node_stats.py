"""nsqd's /stats seen the way nsqadmin sees it (Go's internal/clusterinfo types), and its sums across nodes.

Every stats object is a plain dict with the keys, in the order, nsqadmin's JSON answers have. None stands for
Go's nil slice (JSON null): an aggregate's `nodes`, `channels` or `clients` stay None until something is added,
and a list of no items added to None stays None, as Go's `append` does.

The sums follow Go's `Add` methods exactly, quirks included, so that the answers match key for key:

* `add_topic` appends a node's channel dicts themselves to the aggregate topic; a second node's channel of the
  same name is then added *into the first node's channel dict*, which thereby becomes that channel's aggregate
  (node `*`, the other nodes under `nodes`) inside the first node's topic too;
* `add_e2e` keeps, per quantile, the max, a running average weighted by count and, as Go does, the last node's
  max as `min`.
"""

from __future__ import annotations

import time
from typing import Any

from ..config.queue_settings import counters_of

Stats = dict[str, Any]


def _int(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _str(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    return value if isinstance(value, str) else ""


def _list(raw: dict[str, Any], key: str) -> list[Any] | None:
    value = raw.get(key)
    return value if isinstance(value, list) else None


def e2e_from_nsqd(raw: Any) -> Stats | None:
    """A node's `e2e_processing_latency` (quantile.Result) as an aggregate: each percentile's value is also its
    min, max and average, and the node's count its count."""
    if not isinstance(raw, dict):
        return None
    count = _int(raw, "count")
    percentiles = None
    if isinstance(raw.get("percentiles"), list):
        percentiles = []
        for item in raw["percentiles"]:
            entry = {key: float(value) for key, value in item.items() if isinstance(value, int | float)}
            value = entry.get("value", 0.0)
            entry.update(min=value, max=value, average=value, count=float(count))
            percentiles.append(dict(sorted(entry.items())))
    return {"count": count, "percentiles": percentiles, "topic": _str(raw, "topic"),
            "channel": _str(raw, "channel"), "host": _str(raw, "host")}


def client_from_nsqd(raw: dict[str, Any], node: str, now: float | None = None) -> Stats:
    """One client of a node's channel; `connected` is Go's time since `connect_ts` in ns, to the second."""
    connect_ts = _int(raw, "connect_ts")
    now_s = int(time.time() if now is None else now)
    return {
        "node": node, "remote_address": _str(raw, "remote_address"), "version": _str(raw, "version"),
        "client_id": _str(raw, "client_id"), "hostname": _str(raw, "hostname"),
        "user_agent": _str(raw, "user_agent"), "connect_ts": connect_ts,
        "connected": (now_s - connect_ts) * 1_000_000_000, "in_flight_count": _int(raw, "in_flight_count"),
        "ready_count": _int(raw, "ready_count"), "finish_count": _int(raw, "finish_count"),
        "requeue_count": _int(raw, "requeue_count"), "message_count": _int(raw, "message_count"),
        "sample_rate": _int(raw, "sample_rate"), "deflate": raw.get("deflate") is True,
        "snappy": raw.get("snappy") is True, "authed": raw.get("authed") is True,
        "auth_identity": _str(raw, "auth_identity"), "auth_identity_url": _str(raw, "auth_identity_url"),
        "tls": raw.get("tls") is True, "tls_cipher_suite": _str(raw, "tls_cipher_suite"),
        "tls_version": _str(raw, "tls_version"), "tls_negotiated_protocol": _str(raw, "tls_negotiated_protocol"),
        "tls_negotiated_protocol_is_mutual": raw.get("tls_negotiated_protocol_is_mutual") is True,
    }


def new_channel(node: str, topic: str, channel: str, hostname: str = "") -> Stats:
    """An empty channel aggregate (Go's ChannelStats literal)."""
    return {"node": node, "hostname": hostname, "topic_name": topic, "channel_name": channel, "depth": 0,
            "memory_depth": 0, "backend_depth": 0, "in_flight_count": 0, "deferred_count": 0, "requeue_count": 0,
            "timeout_count": 0, "message_count": 0, "client_count": 0, "nodes": None, "clients": None,
            "paused": False, "e2e_processing_latency": None}


def new_topic(topic: str) -> Stats:
    """An empty topic aggregate (Go's TopicStats literal)."""
    return {"node": "", "hostname": "", "topic_name": topic, "depth": 0, "memory_depth": 0, "backend_depth": 0,
            "message_count": 0, "nodes": None, "channels": None, "paused": False, "e2e_processing_latency": None}


def channel_from_nsqd(raw: dict[str, Any], node: str, hostname: str, topic: str) -> Stats:
    stats = new_channel(node, topic, _str(raw, "channel_name"), hostname)
    for key in ("depth", "backend_depth", "in_flight_count", "deferred_count", "requeue_count", "timeout_count",
                "message_count", "client_count"):
        stats[key] = _int(raw, key)
    stats["memory_depth"] = stats["depth"] - stats["backend_depth"]
    clients = _list(raw, "clients")
    stats["clients"] = None if clients is None else [client_from_nsqd(c, node) for c in clients]
    stats["paused"] = raw.get("paused") is True
    stats["e2e_processing_latency"] = e2e_from_nsqd(raw.get("e2e_processing_latency"))
    return _with_controls(stats, raw)


def _with_controls(stats: Stats, raw: dict[str, Any]) -> Stats:
    """The controls beyond nsqd a node reports on a row (its `"settings"` and their counters), only where it has
    them: a row without them stays Go nsqadmin's."""
    settings = raw.get("settings")
    if isinstance(settings, dict) and settings:
        stats["settings"] = settings
        stats["control_counts"] = {counter: _int(raw, counter) for counter in counters_of(raw)}
    return stats


def topic_from_nsqd(raw: dict[str, Any], node: str, hostname: str) -> Stats:
    """One node's topic from its /stats, with its channels, `node` (the HTTP address) and the memory depth."""
    stats = new_topic(_str(raw, "topic_name"))
    stats.update(node=node, hostname=hostname, depth=_int(raw, "depth"), backend_depth=_int(raw, "backend_depth"),
                 message_count=_int(raw, "message_count"), paused=raw.get("paused") is True)
    stats["memory_depth"] = stats["depth"] - stats["backend_depth"]
    channels = _list(raw, "channels")
    stats["channels"] = None if channels is None else [
        channel_from_nsqd(c, node, hostname, stats["topic_name"]) for c in channels]
    stats["e2e_processing_latency"] = e2e_from_nsqd(raw.get("e2e_processing_latency"))
    return _with_controls(stats, raw)


def by_hostname(items: list[Stats]) -> list[Stats]:
    return sorted(items, key=lambda item: item["hostname"])


def _append(items: list[Any] | None, more: list[Any] | None) -> list[Any] | None:
    """Go's `append(items, more...)`: nil plus nothing stays nil."""
    return items if not more else [*(items or []), *more]


def add_e2e(total: Stats, other: Stats | None) -> None:
    """Go's E2eProcessingLatencyAggregate.Add."""
    if other is None:
        return
    total["host"] = "*"
    total["count"] += other["count"]
    for value in other["percentiles"] or []:
        mine = next((p for p in total["percentiles"] or [] if p.get("quantile", 0.0) == value.get("quantile", 0.0)),
                    None)
        if mine is None:
            mine = {"quantile": value.get("quantile", 0.0)}
            total["percentiles"] = [*(total["percentiles"] or []), mine]
        mine["max"] = max(value.get("max", 0.0), mine.get("max", 0.0))
        mine["min"] = min(value.get("max", 0.0), mine["max"])
        mine["count"] = mine.get("count", 0.0) + value.get("count", 0.0)
        if mine["count"] == 0:
            mine["average"] = 0.0
            continue
        average = mine.get("average", 0.0)
        mine["average"] = average + (value.get("average", 0.0) - average) * value.get("count", 0.0) / mine["count"]


def add_channel(total: Stats, other: Stats) -> None:
    """Go's ChannelStats.Add: sums, `nodes`, clients and e2e of ``other`` into ``total``."""
    total["node"] = "*"
    for key in ("depth", "memory_depth", "backend_depth", "in_flight_count", "deferred_count", "requeue_count",
                "timeout_count", "message_count", "client_count"):
        total[key] += other[key]
    total["paused"] = total["paused"] or other["paused"]
    total["nodes"] = by_hostname([*(total["nodes"] or []), other])
    if total["e2e_processing_latency"] is None:
        total["e2e_processing_latency"] = {"count": 0, "percentiles": None, "topic": total["topic_name"],
                                           "channel": total["channel_name"], "host": total["node"]}
    add_e2e(total["e2e_processing_latency"], other["e2e_processing_latency"])
    clients = _append(total["clients"], other["clients"])
    total["clients"] = None if clients is None else by_hostname(clients)


def add_topic(total: Stats, other: Stats) -> None:
    """Go's TopicStats.Add (see the module's note on how channels are shared)."""
    total["node"] = "*"
    for key in ("depth", "memory_depth", "backend_depth", "message_count"):
        total[key] += other[key]
    total["paused"] = total["paused"] or other["paused"]
    for channel in other["channels"] or []:
        same = [mine for mine in total["channels"] or [] if mine["channel_name"] == channel["channel_name"]]
        for mine in same:
            add_channel(mine, channel)
        if not same:
            total["channels"] = [*(total["channels"] or []), channel]
    total["nodes"] = by_hostname([*(total["nodes"] or []), other])
    if total["e2e_processing_latency"] is None:
        total["e2e_processing_latency"] = {"count": 0, "percentiles": None, "topic": total["topic_name"],
                                           "channel": "", "host": total["node"]}
    add_e2e(total["e2e_processing_latency"], other["e2e_processing_latency"])


def go_numbers(value: Any) -> Any:
    """``value`` with whole floats as ints, as Go's encoding/json writes a float64 (`1500`, not `1500.0`)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {key: go_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [go_numbers(item) for item in value]
    return value
