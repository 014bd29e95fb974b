"""`POST /pub?topic=NAME`, the request nsqd's HTTP API serves most, answered without Falcon.

Falcon's request and response objects, routing and middleware cost about as much as the rest of such a request
(issue 23). This WSGI app answers the plain form, a query of just a valid topic name, with the same checks and
the same answers as the Falcon route (pub.py and responses.py build both); every other request, a /pub with
`defer` or an escaped name included, goes to the Falcon app.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..core.errors import ExitingError
from ..core.nsqd import NSQD
from ..wire.names import is_valid_name
from .pub import publish, read_message
from .responses import APIError, call_v1

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_TOPIC_PARAM = "topic="
#: characters that make a query more than `topic=NAME` for Go's url.ParseQuery (another pair, an escape)
_NOT_PLAIN = frozenset("&;%+")


class PubShortcut:
    def __init__(self, nsqd: NSQD, app: WSGIApp) -> None:
        self._nsqd = nsqd
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        name = self._plain_topic(environ)
        if name is None:
            return self._app(environ, start_response)
        status, headers, body = call_v1(self._nsqd.logger, self._publish, name, environ)
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
