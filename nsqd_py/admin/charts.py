"""Graphite render URLs for the pages' charts, built the way Go nsqadmin's JavaScript builds them: the metric
keys nsqd sends to statsd (--statsd-prefix with `%s` as the node, `.`/`:` → `_`), wrapped in the counter or
gauge format of --statsd-counter-format / --statsd-gauge-format, summed over nodes.
"""

from __future__ import annotations

from urllib.parse import urlencode

from ..go.durations import SECOND
from .options import AdminOptions

#: the statsd type of each metric nsqadmin charts (a counter is drawn as a rate per second)
COUNTERS = frozenset(("message_count", "requeue_count", "timeout_count"))


class Charts:
    """None of the methods is used without --graphite-url (the pages then compute rates from /stats)."""

    def __init__(self, opts: AdminOptions) -> None:
        self.opts = opts

    @property
    def enabled(self) -> bool:
        return bool(self.opts.graphite_url)

    def target(self, metric: str, topic: str, channel: str = "", node: str = "*") -> str:
        """The graphite target of ``metric`` of a topic (or channel), on one node or summed over all (``*``)."""
        host = node.replace(".", "_").replace(":", "_")
        prefix = self.opts.statsd_prefix.replace("%s", host) if "%s" in self.opts.statsd_prefix else \
            self.opts.statsd_prefix
        key = ".".join(part for part in (prefix.rstrip("."), "topic", topic,
                                         *(("channel", channel) if channel else ()), metric) if part)
        fmt = self.opts.statsd_counter_format if metric in COUNTERS else self.opts.statsd_gauge_format
        series = f"sumSeries({fmt.replace('%s', key) if fmt else key})"
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
