"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

`POST /pub?topic=NAME` and `GET /ping`, the requests nsqd's HTTP API serves most, answered without Falcon.

Falcon's request and response objects, routing and middleware cost about as much as the rest of such a request
(issue 23), and importing Falcon a third of the start-up (issue 24). This WSGI app calls the routes' own
implementations (`pub.pub`, `ping.ping`) through the same envelopes and access log line as the Falcon routes for
the plain forms (a query of just `topic=NAME`; a ping without a query); every other request, a /pub with `defer`
or an escaped name included, goes to the Falcon app, built at the first such request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ..core.nsqd import NSQD
from ..http_server.access_log import log_access
from ..http_server.server import WSGIApp
from ..web.responses import call_plain_text, call_v1
from .ping import ping
from .pub import is_plain, pub


class Shortcuts:
    def __init__(self, nsqd: NSQD, make_app: Callable[[], WSGIApp]) -> None:
        self._nsqd = nsqd
        self._make_app = make_app
        self._app: WSGIApp | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method: str = environ["REQUEST_METHOD"]
        path: str = environ["PATH_INFO"]
        query: str = environ["QUERY_STRING"]
        if path == "/pub" and method == "POST" and is_plain(query):
            length = environ.get("CONTENT_LENGTH")
            # call_v1 (web/responses.py) calls http_api/pub.py pub(nsqd, length, input, query) in Go's envelope
            answer = call_v1(self._nsqd.logger, pub, self._nsqd, int(length) if length else None,
                             environ["wsgi.input"], query)
        elif path == "/ping" and method == "GET" and not query:
            start = time.perf_counter_ns()
            answer = call_plain_text(self._nsqd.logger, ping, self._nsqd)  # -> http_api/ping.py ping(nsqd)
            log_access(self._nsqd.logger, int(answer[0].partition(" ")[0]), "GET", environ, start)
        else:
            if self._app is None:  # not a property: mypyc miscompiled it (CONTRIBUTING.md, "Compiled modules")
                # make_app is http_api/app.py's _routes_app -> http_api/routes.py routes_app: the Falcon app
                self._app = self._make_app()
            # every other route: http_api/routes.py routes_app's add_route table names each handler class
            return self._app(environ, start_response)
        status, headers, body = answer
        start_response(status, headers)
        return (body,)
