"""nsqadmin's HTML pages (Go's `/`, `/topics/:topic`, `/topics/:topic/:channel`, `/nodes`, `/nodes/:node`,
`/counter`, `/lookup`, `/static/:asset`; beyond Go, `/topics/:topic/:channel/message?node=&id=`: one message the
channel page lists, admin/messages.py), rendered on the server with Jinja2 from the same `Views` dicts the JSON
API answers. The pages' buttons call that API (POST/DELETE /api/...) from static/admin.js, so the ACL and the
notifications apply to them as to any other client: there is one implementation of each action.
"""

from __future__ import annotations

import functools
import mimetypes
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import falcon
import jinja2

from ..web.responses import HTML_TYPE, APIError, status_line
from .charts import Charts
from .views import Views

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
_UNITS = (("h", 3600 * 10**9), ("m", 60 * 10**9), ("s", 10**9))


def number(value: Any) -> str:
    """12345 → `12,345`: queue depths and counts are read at a glance."""
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}" if isinstance(value, float) else str(value)


def duration(ns: Any) -> str:
    """Nanoseconds as Go prints a time.Duration, rounded to what an operator reads: `1h2m3s`, `250ms`, `42µs`."""
    ns = int(ns or 0)
    if ns == 0:
        return "0s"
    if ns < 10**3:
        return f"{ns}ns"
    if ns < 10**6:
        return f"{ns / 10**3:.0f}µs"
    if ns < 10**9:
        return f"{ns / 10**6:.0f}ms"
    if ns < 60 * 10**9:
        return f"{ns / 10**9:.1f}s"
    parts: list[str] = []
    rest = ns
    for unit, size in _UNITS:
        if rest >= size or parts:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)


@functools.lru_cache(maxsize=4096)
def path_segment(name: str) -> str:
    """Jinja's `urlencode` of a string (quoted, `/` kept), remembered: every refresh quotes the same topic and channel
    names again, and quoting was a quarter of rendering the topics page (bench/bench_nsqadmin.py)."""
    return quote(name, safe="/")


def template_environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(number=number, duration=duration, urlencode=path_segment)
    return env


class Pages:
    """One responder per page; each answers (status, headers, body) for the router's `page` wrapper."""

    def __init__(self, views: Views) -> None:
        self.views = views
        self.charts = Charts(views.opts)
        self.env = template_environment()
        #: --dev-static-dir (Go: "development use only"): /static/ assets read from there, each time, instead of the
        #: packaged ones, so an edited file shows at the next load
        self.static = Path(views.opts.dev_static_dir) if views.opts.dev_static_dir else STATIC

    def _render(self, template: str, section: str, view: Callable[[], dict[str, Any]],
                **context: Any) -> tuple[str, list[tuple[str, str]], bytes]:
        """The page, or the error page with the view's status (502 when no node answered, 404 ...)."""
        opts = self.views.opts
        common = {"base": opts.base_path.rstrip("/") + "/", "section": section, "charts": self.charts,
                  "lookupds": opts.nsqlookupd_http_addresses, "now_ms": int(time.time() * 1000),
                  "statsd_interval": opts.statsd_interval // 10**9}
        try:
            data = view()
        except APIError as err:
            body = self.env.get_template("error.html").render(common, code=err.code, text=err.text, **context)
            return status_line(err.code), [("Content-Type", HTML_TYPE)], body.encode()
        body = self.env.get_template(template).render(common, data=data, **context)
        return status_line(200), [("Content-Type", HTML_TYPE)], body.encode()

    def on_get_index(self, req: falcon.Request, resp: falcon.Response) -> Any:
        return self._render("topics.html", "topics", self.views.topics)

    def on_get_topic(self, req: falcon.Request, resp: falcon.Response, topic: str) -> Any:
        return self._render("topic.html", "topics", lambda: self.views.topic(topic), topic=topic)

    def on_get_channel(self, req: falcon.Request, resp: falcon.Response, topic: str, channel: str) -> Any:
        show = self._may_read_messages(req)
        return self._render("channel.html", "topics", lambda: self._channel_with_messages(topic, channel, show),
                            topic=topic, channel=channel)

    def _channel_with_messages(self, topic: str, channel: str, show: bool) -> dict[str, Any]:
        """The channel view and, beyond nsqd, its first messages under `peek` (not in the JSON API's answer)."""
        data = self.views.channel(topic, channel)
        if show and "channel_name" in data:
            data["peek"] = self.views.channel_messages(data)
        return data

    def on_get_message(self, req: falcon.Request, resp: falcon.Response, topic: str, channel: str) -> Any:
        """Beyond nsqd: one message of the channel (`?node=ADDRESS&id=ID`), opened from the channel page."""
        node, msg_id = req.get_param("node") or "", req.get_param("id") or ""
        if not self._may_read_messages(req):
            raise APIError(403, "FORBIDDEN")
        return self._render("message.html", "topics", lambda: self.views.channel_message(topic, channel, node, msg_id),
                            topic=topic, channel=channel, node=node, msg_id=msg_id)

    def _may_read_messages(self, req: falcon.Request) -> bool:
        """Message bodies are for the admin users (--admin-user, by --acl-http-header), as the actions are: with none
        configured, for every viewer, as every action is then."""
        users = self.views.opts.admin_users
        return not users or (req.get_header(self.views.opts.acl_http_header) or "") in users

    def on_get_nodes(self, req: falcon.Request, resp: falcon.Response) -> Any:
        return self._render("nodes.html", "nodes", self.views.nodes)

    def on_get_node(self, req: falcon.Request, resp: falcon.Response, node: str) -> Any:
        return self._render("node.html", "nodes", lambda: self.views.node(node), node=node)

    def on_get_counter(self, req: falcon.Request, resp: falcon.Response) -> Any:
        return self._render("counter.html", "counter", self.views.counter)

    def on_get_lookup(self, req: falcon.Request, resp: falcon.Response) -> Any:
        return self._render("lookup.html", "lookup", lambda: self.views.topics(inactive=True))

    def on_get_static(self, req: falcon.Request, resp: falcon.Response, asset: str) -> Any:
        path = self.static / asset
        if "/" in asset or asset.startswith(".") or not path.is_file():
            raise APIError(404, "NOT_FOUND")
        kind = mimetypes.guess_type(asset)[0] or "application/octet-stream"
        return status_line(200), [("Content-Type", kind), ("Cache-Control", "max-age=300")], path.read_bytes()
