"""Graphite render URLs for the pages' charts, built the way Go nsqadmin's JavaScript builds them: the metric
keys nsqd sends to statsd (--statsd-prefix with `%s` as the node, `.`/`:` → `_`), wrapped in the counter or
gauge format of --statsd-counter-format / --statsd-gauge-format, summed over nodes.
"""

from __future__ import annotations

from urllib.parse import urlencode

from ..go.durations import SECOND
from .options import AdminOptions

#: the statsd type of each metric nsqadmin charts (a counter is drawn as a rate per second)
COUNTERS = frozenset(("message_count", "requeue_count", "timeout_count", "gc_runs"))
#: a node page's charts of the nsqd process (--statsd-mem-stats): (metric key under `mem.`, title), as Go's
NODE_CHARTS = (("*_bytes", "GC Pressure"), ("gc_pause_*", "GC Pause Percentiles"), ("gc_runs", "GC Runs"),
               ("heap_objects", "Heap Objects In-Use"))


class Charts:
    """None of the methods is used without --graphite-url (the pages then compute rates from /stats)."""

    node_charts = NODE_CHARTS

    def __init__(self, opts: AdminOptions) -> None:
        self.opts = opts

    @property
    def enabled(self) -> bool:
        return bool(self.opts.graphite_url)

    def target(self, metric: str, topic: str, channel: str = "", node: str = "*") -> str:
        """The graphite target of ``metric`` of a topic (or channel), on one node or summed over all (``*``)."""
        key = self._key(node, "topic", topic, *(("channel", channel) if channel else ()), metric)
        return self._per_second(metric, f"sumSeries({self._formatted(metric, key)})")

    def node_target(self, metric: str, node: str) -> str:
        """The graphite target of one of NODE_CHARTS' metrics of the nsqd at ``node`` (GC runs averaged, as Go's)."""
        series = self._formatted(metric, self._key(node, "mem", metric))
        if metric == "gc_runs":
            series = f"movingAverage({series},45)"
        return self._per_second(metric, series)

    def _key(self, node: str, *parts: str) -> str:
        host = node.replace(".", "_").replace(":", "_")
        prefix = self.opts.statsd_prefix.replace("%s", host) if "%s" in self.opts.statsd_prefix else \
            self.opts.statsd_prefix
        return ".".join(part for part in (prefix.rstrip("."), *parts) if part)

    def _formatted(self, metric: str, key: str) -> str:
        fmt = self.opts.statsd_counter_format if metric in COUNTERS else self.opts.statsd_gauge_format
        return fmt.replace("%s", key) if fmt else key

    def _per_second(self, metric: str, series: str) -> str:
        if metric in COUNTERS:
            return f"scale({series},{SECOND / self.opts.statsd_interval:.4g})"
        return series

    def render_url(self, target: str, *, large: bool = False) -> str:
        """A graphite PNG of the last two hours: a sparkline, or with ``large`` a chart with axes. With
        --proxy-graphite the browser asks nsqadmin's `<base-path>/render`, which forwards it."""
        base = self.opts.base_path.rstrip("/") if self.opts.proxy_graphite else self.opts.graphite_url.rstrip("/")
        size = {"width": 800, "height": 250} if large else {"width": 120, "height": 20, "hideGrid": "true",
                                                             "hideLegend": "true", "hideAxes": "true",
                                                             "bgcolor": "ff000000", "fgcolor": "999999"}
        return f"{base}/render?" + urlencode({"target": target, "from": "-2h", "yMin": 0, "lineWidth": 2, **size})
