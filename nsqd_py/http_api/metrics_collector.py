"""The Prometheus side of GET /metrics (metrics.py): imported at the first scrape, not at start-up.

A custom collector reads one `core.stats.snapshot` per scrape, so /metrics, /stats and statsd always agree.
Names and labels are listed in docs/cluster.md; counters reset when nsqd restarts, as nsqd's own counters do.
The process and Python runtime collectors of prometheus_client are included too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..config import queue_settings
from ..core import stats
from ..runtime.version import NSQ_VERSION

if TYPE_CHECKING:
    from ..core.nsqd import NSQD

_TOPIC = ["topic"]
_CHANNEL = ["topic", "channel"]

#: (snapshot key, metric name, help, counter?) for topic rows, then channel rows
_TOPIC_FIELDS = (
    ("depth", "nsq_topic_depth", "Messages queued in the topic (memory and disk).", False),
    ("backend_depth", "nsq_topic_backend_depth", "Messages queued in the topic's disk queue.", False),
    ("message_count", "nsq_topic_messages", "Messages published to the topic.", True),
    ("message_bytes", "nsq_topic_message_bytes", "Bytes of message bodies published to the topic.", True),
    ("paused", "nsq_topic_paused", "1 when the topic is paused.", False),
)
_CHANNEL_FIELDS = (
    ("depth", "nsq_channel_depth", "Messages queued in the channel (memory and disk).", False),
    ("backend_depth", "nsq_channel_backend_depth", "Messages queued in the channel's disk queue.", False),
    ("in_flight_count", "nsq_channel_in_flight", "Messages delivered and not yet finished or requeued.", False),
    ("deferred_count", "nsq_channel_deferred", "Messages waiting for their deferral to end.", False),
    ("message_count", "nsq_channel_messages", "Messages the channel received from its topic.", True),
    ("requeue_count", "nsq_channel_requeued", "Messages requeued by consumers (REQ).", True),
    ("timeout_count", "nsq_channel_timed_out", "In-flight messages that timed out.", True),
    ("client_count", "nsq_channel_clients", "Consumers subscribed to the channel.", False),
    ("paused", "nsq_channel_paused", "1 when the channel is paused.", False),
)


class SnapshotCollector(Collector):
    """Prometheus metrics from one stats snapshot of an nsqd."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def collect(self) -> Iterator[Metric]:
        snap = stats.snapshot(self.nsqd, include_mem=False)
        info = GaugeMetricFamily("nsq_info", "nsqd version (always 1).", labels=["version"])
        info.add_metric([NSQ_VERSION], 1)
        yield info
        yield GaugeMetricFamily("nsq_healthy", "1 when /ping says OK, 0 after a failed disk write.",
                                1 if snap["health"] == "OK" else 0)
        yield GaugeMetricFamily("nsq_start_time_seconds", "When nsqd started (unix time).", snap["start_time"])
        topics = snap["topics"] or []
        yield GaugeMetricFamily("nsq_topics", "Number of topics.", len(topics))
        channels = [(t["topic_name"], c) for t in topics for c in t["channels"]]
        for key, name, doc, counter in _TOPIC_FIELDS:
            family = _family(name, doc, counter, _TOPIC)
            for topic in topics:
                family.add_metric([topic["topic_name"]], float(topic[key]))
            yield family
        for key, name, doc, counter in _CHANNEL_FIELDS:
            family = _family(name, doc, counter, _CHANNEL)
            for topic_name, channel in channels:
                family.add_metric([topic_name, channel["channel_name"]], float(channel[key]))
            yield family
        yield from _controls("nsq_topic", _TOPIC, [([t["topic_name"]], t) for t in topics])
        yield from _controls("nsq_channel", _CHANNEL, [([name, c["channel_name"]], c) for name, c in channels])
        yield from _e2e("nsq_topic", _TOPIC, [([t["topic_name"]], t["e2e_processing_latency"]) for t in topics])
        yield from _e2e("nsq_channel", _CHANNEL,
                        [([name, c["channel_name"]], c["e2e_processing_latency"]) for name, c in channels])


def _family(name: str, doc: str, counter: bool, labels: list[str]) -> GaugeMetricFamily | CounterMetricFamily:
    if counter:
        return CounterMetricFamily(name, doc, labels=labels)
    return GaugeMetricFamily(name, doc, labels=labels)


def _controls(prefix: str, labels: list[str], rows: list[tuple[list[str], stats.Stats]]) -> Iterator[Metric]:
    """The controls beyond nsqd (config/queue_settings.py) where they are on: each numeric setting as
    `<prefix>_setting{setting=...}`, each of their counters as `<prefix>_<counter>_total`; nothing where none is."""
    rows = [(values, row) for values, row in rows if "settings" in row]
    if not rows:
        return
    gauge = GaugeMetricFamily(f"{prefix}_setting", "A numeric control beyond nsqd in force (its /stats value).",
                              labels=[*labels, "setting"])
    counters: dict[str, CounterMetricFamily] = {}
    for values, row in rows:
        for key, value in row["settings"].items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                gauge.add_metric([*values, key], float(value))
        for counter in queue_settings.counters_of(row):
            family = counters.get(counter)
            if family is None:
                family = counters[counter] = CounterMetricFamily(
                    f"{prefix}_{counter.removesuffix('_count')}", f"/stats {counter}.", labels=labels)
            family.add_metric(values, float(row[counter]))
    yield gauge
    yield from counters.values()


def _e2e(prefix: str, labels: list[str], rows: list[tuple[list[str], stats.Stats]]) -> Iterator[Metric]:
    """The configured e2e percentiles (seconds) and how many FINs the window holds; nothing without
    --e2e-processing-latency-percentile."""
    rows = [(values, latency) for values, latency in rows if latency["percentiles"] is not None]
    if not rows:
        return
    quantiles = GaugeMetricFamily(f"{prefix}_e2e_processing_latency_seconds",
                                  "Publish-to-FIN time percentiles over the e2e window.", labels=[*labels, "quantile"])
    counts = GaugeMetricFamily(f"{prefix}_e2e_processing_latency_count", "FINs in the e2e window.", labels=labels)
    for values, latency in rows:
        counts.add_metric(values, latency["count"])
        for item in latency["percentiles"]:
            quantiles.add_metric([*values, str(float(item["quantile"]))], item["value"] / 1e9)
    yield quantiles
    yield counts


def new_registry(nsqd: NSQD) -> CollectorRegistry:
    """A registry of its own (not prometheus_client's global one): the snapshot, process and runtime collectors."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(nsqd))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()
