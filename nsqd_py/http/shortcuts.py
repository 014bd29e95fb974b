"""`POST /pub?topic=NAME` and `GET /ping`, the requests nsqd's HTTP API serves most, answered without Falcon.

Falcon's request and response objects, routing and middleware cost about as much as the rest of such a request
(issue 23), and importing Falcon a third of the start-up (issue 24). This WSGI app answers the plain forms (a
query of just a valid topic name; a ping without a query) with the same checks, answers and access log lines as
the Falcon routes (pub.py, responses.py and access_log.py build both); every other request, a /pub with `defer`
or an escaped name included, goes to the Falcon app, built at the first such request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ..core.errors import ExitingError
from ..core.nsqd import NSQD
from ..wire.names import is_valid_name
from .access_log import log_access
from .pub import publish, read_message
from .responses import APIError, call_plain_text, call_v1

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_TOPIC_PARAM = "topic="
#: characters that make a query more than `topic=NAME` for Go's url.ParseQuery (another pair, an escape)
_NOT_PLAIN = frozenset("&;%+")


def ping(nsqd: NSQD) -> str:
    """`GET /ping`: nsqd's health text, as a 500 when it is not healthy."""
    health = nsqd.health()
    if not nsqd.is_healthy():
        raise APIError(500, health)
    return health


class Shortcuts:
    def __init__(self, nsqd: NSQD, make_app: Callable[[], WSGIApp]) -> None:
        self._nsqd = nsqd
        self._make_app = make_app
        self._app: WSGIApp | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["PATH_INFO"] == "/ping" and environ["REQUEST_METHOD"] == "GET" and not environ["QUERY_STRING"]:
            return self._ping(environ, start_response)
        name = self._plain_topic(environ)
        if name is None:
            if self._app is None:  # (a property here is miscompiled by mypyc: its call returned the app)
                self._app = self._make_app()
            return self._app(environ, start_response)
        status, headers, body = call_v1(self._nsqd.logger, self._publish, name, environ)
        start_response(status, headers)
        return (body,)

    def _ping(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start = time.perf_counter_ns()
        status, headers, body = call_plain_text(self._nsqd.logger, ping, self._nsqd)
        log_access(self._nsqd.logger, int(status.partition(" ")[0]), "GET", environ, start)
        start_response(status, headers)
        return (body,)

    @staticmethod
    def _plain_topic(environ: dict[str, Any]) -> str | None:
        """The topic of a `POST /pub?topic=NAME` with a valid NAME, else None."""
        if environ["PATH_INFO"] != "/pub" or environ["REQUEST_METHOD"] != "POST":
            return None
        query: str = environ["QUERY_STRING"]
        if not query.startswith(_TOPIC_PARAM) or not _NOT_PLAIN.isdisjoint(query):
            return None
        name = query[len(_TOPIC_PARAM):]
        return name if is_valid_name(name) else None

    def _publish(self, name: str, environ: dict[str, Any]) -> str:
        length = environ.get("CONTENT_LENGTH")
        body = read_message(self._nsqd, int(length) if length else None, environ["wsgi.input"])
        try:
            topic = self._nsqd.get_topic(name)
        except ExitingError:
            raise APIError(503, "EXITING") from None
        publish(topic, [body])
        return "OK"
