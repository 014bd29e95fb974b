"""--proxy-graphite: GET <base-path>/render is passed to --graphite-url (with the URL's basic auth), so that the
browser draws graphite's graphs through nsqadmin. Like Go's reverse proxy it sits outside the API: no
envelope, no access line; an unreachable graphite answers 502.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3.exceptions import HTTPError

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_HOP_BY_HOP = frozenset(("connection", "keep-alive", "transfer-encoding", "content-encoding", "content-length"))


def graphite_proxy(app: WSGIApp, graphite_url: str, base_path: str, timeout: tuple[float, float]) -> WSGIApp:
    """``app`` with GET `<base_path>/render` answered by graphite."""
    target = urlsplit(graphite_url)
    auth = urllib3.make_headers(basic_auth=f"{target.username}:{target.password or ''}") if target.username else {}
    pool = urllib3.PoolManager(timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
                               retries=urllib3.Retry(total=None, connect=0, read=0, status=0, other=0, redirect=30))
    origin = f"{target.scheme}://{target.hostname}" + (f":{target.port}" if target.port else "")
    render = posixpath.join(base_path, "render")

    def proxied(env: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if env.get("PATH_INFO") != render or env.get("REQUEST_METHOD") != "GET":
            return app(env, start_response)
        query = env.get("QUERY_STRING", "")
        try:
            answer = pool.request("GET", origin + render + (f"?{query}" if query else ""), headers=auth)
        except HTTPError:
            start_response("502 Bad Gateway", [("Content-Length", "0")])
            return [b""]
        headers = [(k, v) for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP]
        body = answer.data  # decoded: Content-Encoding is dropped with the hop-by-hop headers
        start_response(f"{answer.status} {answer.reason}",
                       [*headers, ("Content-Length", str(len(body)))])
        return [body]

    return proxied
