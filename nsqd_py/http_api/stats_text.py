"""The plain-text /stats report (nsqd's `printStats` and `ClientV2Stats.String`), from the same snapshot as JSON."""

from __future__ import annotations

import time
from typing import Any

from ..config.queue_settings import counters_of
from ..core.stats import Stats
from ..go.durations import SECOND, format_duration
from ..runtime.version import version_line


def render_stats(stats: Stats, now: float) -> str:
    out = [
        f"{version_line()}\n",
        f"start_time {rfc3339(stats['start_time'])}\n",
        f"uptime {format_duration(int((now - stats['start_time']) * SECOND))}\n",
        f"\nHealth: {stats['health']}\n",
    ]
    memory = stats.get("memory")
    if memory is not None:
        out.append("\nMemory:\n")
        out.extend(f"   {name:<25}\t{value}\n" for name, value in memory.items())
    topics = stats["topics"] or []
    out.append("\nTopics:" if topics else "\nTopics: None\n")
    for topic in topics:
        prefix = "*P " if topic["paused"] else "   "
        out.append(
            f"\n{prefix}[{topic['topic_name']:<15}] depth: {topic['depth']:<5} be-depth: {topic['backend_depth']:<5} "
            f"msgs: {topic['message_count']:<8} e2e%: {e2e_text(topic['e2e_processing_latency'])}"
            f"{controls_text(topic)}\n"
        )
        for channel in topic["channels"]:
            prefix = "   *P " if channel["paused"] else "      "
            out.append(
                f"{prefix}[{channel['channel_name']:<25}] depth: {channel['depth']:<5} "
                f"be-depth: {channel['backend_depth']:<5} inflt: {channel['in_flight_count']:<4} "
                f"def: {channel['deferred_count']:<4} re-q: {channel['requeue_count']:<5} "
                f"timeout: {channel['timeout_count']:<5} msgs: {channel['message_count']:<8} "
                f"e2e%: {e2e_text(channel['e2e_processing_latency'])}{controls_text(channel)}\n"
            )
            out.extend(f"        {client_text(client, now)}\n" for client in channel["clients"] or [])
    producers = stats["producers"]
    if producers:
        out.append("\nProducers:\n")
        out.extend(f"   {client_text(client, now)}\n" for client in producers)
    else:
        out.append("\nProducers: None\n")
    return "".join(out)


def controls_text(row: dict[str, Any]) -> str:
    """The controls beyond nsqd on a row (nothing where none is on, so the line is nsqd's): ` dropped: 3
    settings: max_channel_depth=1000 channel_overflow=drop-head`."""
    settings = row.get("settings")
    if not settings:
        return ""
    counts = "".join(f" {c.removesuffix('_count')}: {row[c]}" for c in counters_of(row))
    return counts + " settings: " + " ".join(f"{key}={value}" for key, value in settings.items())


def client_text(client: dict[str, Any], now: float) -> str:
    """A producer (a client with `pub_counts`) or a consumer line."""
    connected = format_duration(int(now - client["connect_ts"]) * SECOND)
    ident = f"{client['hostname']}:{_port(client['remote_address'])} {client['user_agent']}"
    pub_counts = client.get("pub_counts")
    if pub_counts:
        total = sum(p["count"] for p in pub_counts)
        topics = ",".join(f"{p['topic']}={p['count']}" for p in pub_counts)
        return f"[{client['version']} {ident:<21}] msgs: {total:<8} topics: {topics} connected: {connected}"
    return (
        f"[{client['version']} {ident:<21}] state: {client['state']} inflt: {client['in_flight_count']:<4} "
        f"rdy: {client['ready_count']:<4} fin: {client['finish_count']:<8} re-q: {client['requeue_count']:<8} "
        f"msgs: {client['message_count']:<8} connected: {connected}"
    )


def e2e_text(result: dict[str, Any]) -> str:
    return ", ".join(nanoseconds_to_human(p["value"]) for p in result["percentiles"] or [])


def nanoseconds_to_human(value: float) -> str:
    """nsqd's `stringy.NanoSecondToHuman`: one decimal, in s, ms, us or ns."""
    for limit, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value > limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{float(value):.1f}ns"


def rfc3339(ts: int) -> str:
    """Go's `time.RFC3339` of a local time: `2026-11-22T07:16:42Z`, or with `+01:00` style offsets."""
    local = time.localtime(ts)
    offset = local.tm_gmtoff or 0
    if offset == 0:
        zone = "Z"
    else:
        sign = "+" if offset > 0 else "-"
        zone = f"{sign}{abs(offset) // 3600:02d}:{abs(offset) % 3600 // 60:02d}"
    return time.strftime("%Y-%m-%dT%H:%M:%S", local) + zone


def _port(address: str) -> str:
    """The port Go's `net.SplitHostPort` finds, or "" where it fails (a unix socket's `@`)."""
    host, sep, port = address.rpartition(":")
    if not sep or (":" in host and not (host.startswith("[") and host.endswith("]"))):
        return ""
    return port
