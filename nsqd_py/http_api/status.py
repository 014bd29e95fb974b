"""Read-only endpoints: GET /info and GET /stats (GET /ping is ping.py)."""

from __future__ import annotations

import socket
import time
from typing import Any

import falcon

from ..cluster.context import ServerContext
from ..core import stats
from ..core.nsqd import NSQD
from ..runtime.version import NSQ_VERSION
from ..tcp.client_stats import client_stats
from ..web.params import bool_param, first, request_query
from .http_auth import AUTH_STATE, visible_stats
from .stats_text import render_stats


class Info:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        """Go's keys; beyond nsqd, `"draining": true` last while nsqd drains (Go's bytes otherwise)."""
        ctx, opts = self.ctx, self.ctx.opts
        info: dict[str, Any] = {
            "version": NSQ_VERSION,
            "broadcast_address": opts.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": ctx.http_port,
            "tcp_port": ctx.tcp_port,
            "start_time": ctx.nsqd.start_time,
            "max_heartbeat_interval": opts.max_heartbeat_interval,
            "max_output_buffer_size": opts.max_output_buffer_size,
            "max_output_buffer_timeout": opts.max_output_buffer_timeout,
            "max_deflate_level": opts.max_deflate_level,
            "topology_zone": opts.topology_zone,
            "topology_region": opts.topology_region,
        }
        if ctx.nsqd.draining:
            info["draining"] = True
        return info


class Stats:
    """`format=json` answers the snapshot as JSON; any other format, the text report. Beyond nsqd, with
    --http-auth-required both show only what the caller may subscribe to (http_auth.py)."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any] | str:
        query = request_query(req)
        snapshot = stats.snapshot(
            self.nsqd,
            topic=first(query, "topic") or "",
            channel=first(query, "channel") or "",
            describe_client=client_stats if bool_param(query, "include_clients") else None,
            include_mem=bool_param(query, "include_mem"),
        )
        state = req.env.get(AUTH_STATE)
        if state is not None:
            snapshot = visible_stats(snapshot, state)
        if first(query, "format") == "json":
            return snapshot
        return render_stats(snapshot, time.time())
