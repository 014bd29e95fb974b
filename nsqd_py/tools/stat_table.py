"""nsq_stat's numbers: one channel's stats summed over the nsqd that have the topic, and the table rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HEADER = (
    "------rate------+----------------depth----------------+--------------metadata---------------\n"
    f"{'ingress':>7s} {'egress':>7s} | {'total':>7s} {'mem':>7s} {'disk':>7s} {'inflt':>5s} {'def':>5s} | "
    f"{'req':>7s} {'t-o':>7s} {'msgs':>12s} {'clients':>7s}"
)
#: a header is printed before every this many reports (the Go tool's constant)
HEADER_EVERY = 25


@dataclass
class ChannelTotals:
    """clusterinfo.ChannelStats as nsq_stat uses it."""

    depth: int = 0
    memory_depth: int = 0
    backend_depth: int = 0
    in_flight: int = 0
    deferred: int = 0
    requeued: int = 0
    timed_out: int = 0
    messages: int = 0
    clients: int = 0

    def add(self, channel: dict[str, Any]) -> None:
        self.depth += channel["depth"]
        self.backend_depth += channel["backend_depth"]
        self.memory_depth += channel["depth"] - channel["backend_depth"]
        self.in_flight += channel["in_flight_count"]
        self.deferred += channel["deferred_count"]
        self.requeued += channel["requeue_count"]
        self.timed_out += channel["timeout_count"]
        self.messages += channel["message_count"]
        self.clients += channel["client_count"]


def channel_totals(stats: list[dict[str, Any]], topic: str, channel: str) -> ChannelTotals | None:
    """Sum ``channel`` of ``topic`` over several nsqd `/stats` documents; None if no nsqd has it."""
    totals, found = ChannelTotals(), False
    for doc in stats:
        for t in doc.get("topics") or []:
            if t["topic_name"] != topic:
                continue
            for c in t.get("channels") or []:
                if c["channel_name"] == channel:
                    totals.add(c)
                    found = True
    return totals if found else None


def row(now: ChannelTotals, before: ChannelTotals, interval: float) -> str:
    """One report: rates over the interval (truncated like Go's int64(float64)), then current values."""
    ingress = int((now.messages - before.messages) / interval)
    egress = int((now.messages - before.messages - (now.depth - before.depth)) / interval)
    return (f"{ingress:7d} {egress:7d} | {now.depth:7d} {now.memory_depth:7d} {now.backend_depth:7d} "
            f"{now.in_flight:5d} {now.deferred:5d} | {now.requeued:7d} {now.timed_out:7d} {now.messages:12d} "
            f"{now.clients:7d}")
