"""The Falcon app of nsqd's HTTP API: its routes, on a router with nsqd's (httprouter's) rules.

`/debug/*` (Go's pprof and runtime knobs) is not served: it answers like any unknown path. `/metrics`
(Prometheus text, see metrics.py) is ours, not nsqd's.
"""

from __future__ import annotations

import falcon

from ..cluster.context import ServerContext
from ..core.errors import BackendError
from ..web.responses import JSON_TYPE, NSQ_CONTENT_TYPE, status_line
from ..web.router import Router, falcon_app
from .config import Config
from .metrics import Metrics
from .peek import ChannelPeek, TopicPeek
from .ping import Ping
from .pub import MPub, Pub
from .settings import QueueSettingsResource
from .status import Info, Stats
from .topics import Channels, Topics

_ACTIONS = ("create", "delete", "empty", "pause", "unpause")


class _TLSRequired:
    """`--tls-required=true` on the plain-HTTP server: every request gets nsqd's 403 (unlogged)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = status_line(403)
        resp.set_header(*NSQ_CONTENT_TYPE)
        resp.content_type = JSON_TYPE
        resp.data = f'{{"message": "TLS_REQUIRED", "https_port": {self.ctx.https_port}}}'.encode()
        resp.complete = True


def tls_required_app(ctx: ServerContext) -> falcon.App:
    return routes_app(ctx, [_TLSRequired(ctx)])


def routes_app(ctx: ServerContext, middleware: list[object] | None = None) -> falcon.App:
    """Every route of nsqd's API but the shortcuts' two: the table below maps a path to its handler class (its
    on_get / on_post, or on_<method>_<suffix>); web/router.py matches and calls them, Go's httprouter rules."""
    nsqd = ctx.nsqd
    app = falcon_app(Router(nsqd.logger, internal_errors=(BackendError,)), middleware or [])
    app.add_route("/ping", Ping(nsqd), plain=True)
    app.add_route("/info", Info(ctx))
    app.add_route("/stats", Stats(nsqd))
    app.add_route("/metrics", Metrics(nsqd), plain=True)
    app.add_route("/pub", Pub(nsqd), log=False)
    app.add_route("/mpub", MPub(nsqd), log=False)
    topics, channels = Topics(nsqd), Channels(nsqd)
    for action in _ACTIONS:
        app.add_route(f"/topic/{action}", topics, suffix=action)
        app.add_route(f"/channel/{action}", channels, suffix=action)
    app.add_route("/channel/reset", channels, suffix="reset")  # beyond nsqd
    app.add_route("/topic/settings", QueueSettingsResource(nsqd, "topic"))  # beyond nsqd
    app.add_route("/channel/settings", QueueSettingsResource(nsqd, "channel"))
    app.add_route("/topic/peek", TopicPeek(nsqd))  # beyond nsqd
    app.add_route("/channel/peek", ChannelPeek(nsqd))
    app.add_route("/config/{opt}", Config(ctx))
    return app
