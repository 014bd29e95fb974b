"""The WSGI app of nsqd's HTTP API: the shortcuts (shortcuts.py) in front of the Falcon routes (routes.py).

The Falcon app is built at the first request the shortcuts do not answer: importing Falcon is a third of nsqd's
start-up, and a process that is only pinged and published to never needs it. Beyond nsqd, `--http-auth-required`
puts http_auth.py's gate in front of both; without it the shortcuts are the app, as before.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ..config.options import TLS_REQUIRED
from .shortcuts import Shortcuts

if TYPE_CHECKING:
    from ..cluster.context import ServerContext
    from ..http_server.server import WSGIApp


def create_app(ctx: ServerContext, tls_enabled: bool = False) -> WSGIApp:
    """``tls_enabled``: this app serves the HTTPS listener (so TLS-required does not turn it away)."""
    if not tls_enabled and ctx.nsqd.opts.tls_required == TLS_REQUIRED:
        from .routes import tls_required_app

        return tls_required_app(ctx)
    # Shortcuts (shortcuts.py) answers POST /pub and GET /ping itself; the rest goes to _routes_app below
    # (routes.py routes_app), built at the first such request
    app = Shortcuts(ctx.nsqd, functools.partial(_routes_app, ctx))
    if not ctx.opts.http_auth_required:
        return app
    from .http_auth import HTTPAuth  # here: only with the flag

    # -> http_auth.py HTTPAuth.__call__, which hands what it lets through to the Shortcuts
    return HTTPAuth.for_context(ctx, app)


def _routes_app(ctx: ServerContext) -> WSGIApp:
    from .routes import routes_app

    return routes_app(ctx)
