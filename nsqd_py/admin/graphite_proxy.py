"""--proxy-graphite: GET <base-path>/render is passed to --graphite-url (with the URL's basic auth), so that the
browser draws graphite's graphs through nsqadmin. Like Go's reverse proxy it sits outside the API: no
envelope, no access line; an unreachable graphite answers 502.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import requests

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_HOP_BY_HOP = frozenset(("connection", "keep-alive", "transfer-encoding", "content-encoding", "content-length"))


def graphite_proxy(app: WSGIApp, graphite_url: str, base_path: str, timeout: tuple[float, float]) -> WSGIApp:
    """``app`` with GET `<base_path>/render` answered by graphite."""
    target = urlsplit(graphite_url)
    auth = (target.username or "", target.password or "") if target.username else None
    origin = f"{target.scheme}://{target.hostname}" + (f":{target.port}" if target.port else "")
    render = posixpath.join(base_path, "render")

    def proxied(env: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if env.get("PATH_INFO") != render or env.get("REQUEST_METHOD") != "GET":
            return app(env, start_response)
        query = env.get("QUERY_STRING", "")
        try:
            answer = requests.get(origin + render + (f"?{query}" if query else ""), auth=auth, timeout=timeout)
        except requests.RequestException:
            start_response("502 Bad Gateway", [("Content-Length", "0")])
            return [b""]
        headers = [(k, v) for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP]
        body = answer.content
        start_response(f"{answer.status_code} {answer.reason}",
                       [*headers, ("Content-Length", str(len(body)))])
        return [body]

    return proxied
