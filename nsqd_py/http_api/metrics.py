"""GET /metrics: the stats snapshot in Prometheus' text format (nsqd itself only pushes to statsd, see #732).

The collectors live in metrics_collector.py (names and labels: docs/cluster.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import falcon

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ..core.nsqd import NSQD


class Metrics:
    """The /metrics resource. Its registry (metrics_collector.py) is made at the first scrape:
    prometheus_client costs start-up ~20 ms, and many nsqd are never scraped."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self.registry: CollectorRegistry | None = None

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> str:
        from .metrics_collector import new_registry, render

        if self.registry is None:
            self.registry = new_registry(self.nsqd)
        return render(self.registry)
