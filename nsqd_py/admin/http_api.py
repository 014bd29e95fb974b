"""nsqadmin's HTTP API on Falcon, with nsqd's envelope, access log and httprouter-like router: every route under
--base-path, answers as Go nsqadmin's (`views` builds them).

GET /ping, /api/topics[?inactive=true], /api/topics/{topic}, /api/topics/{topic}/{channel}, /api/nodes,
/api/nodes/{node}, /api/counter, /api/graphite, /config/{opt}; POST /api/topics (create), /api/topics/{topic}
and /api/topics/{topic}/{channel} (pause, unpause, empty); DELETE /api/topics/{topic},
/api/topics/{topic}/{channel}, /api/nodes/{node} (tombstone). With --admin-user, the actions answer 403 unless
the --acl-http-header names one of them. /config answers only the --allow-config-from-cidr network.
The HTML pages (`pages`) are routed here too, under the same --base-path.
"""

from __future__ import annotations

import ipaddress
import posixpath
from typing import Any

import falcon
import orjson

from ..go.gojson import GoJSONError, decode_struct
from ..go.settings import toml_keys
from ..runtime.log import LEVELS_BY_NAME
from ..web.responses import APIError
from ..web.router import falcon_app
from ..wire.names import is_valid_name
from .node_stats import go_numbers
from .notify import Notifier
from .options import AdminOptions
from .pages import Pages
from .routing import AdminRouter
from .views import ACTIONS, Views, api_error

#: lg.ParseLogLevel's names
_LOG_LEVELS = {name: LEVELS_BY_NAME[name] for name in ("debug", "info", "warn", "error", "fatal")}
_MAX_CONFIG_BODY = 1024 * 1024


def create_app(views: Views, notifier: Notifier) -> falcon.App:
    app = falcon_app(AdminRouter(views.logger))
    api = AdminAPI(views, notifier)
    base = views.opts.base_path
    for path, suffix in (("/ping", "ping"), ("/api/topics", "topics"), ("/api/topics/{topic}", "topic"),
                         ("/api/topics/{topic}/{channel}", "channel"), ("/api/nodes", "nodes"),
                         ("/api/nodes/{node}", "node"), ("/api/counter", "counter"),
                         ("/api/graphite", "graphite"), ("/config/{opt}", "config")):
        app.add_route(posixpath.join(base, path.lstrip("/")), api, suffix=suffix, plain=path == "/ping")
    pages = Pages(views)
    for path, suffix in (("/", "index"), ("/topics", "index"), ("/topics/{topic}", "topic"),
                         ("/topics/{topic}/{channel}", "channel"), ("/topics/{topic}/{channel}/message", "message"),
                         ("/nodes", "nodes"), ("/nodes/{node}", "node"), ("/counter", "counter"),
                         ("/lookup", "lookup"), ("/static/{asset}", "static")):
        app.add_route(posixpath.join(base, path.lstrip("/")), pages, suffix=suffix, page=True)
    return app


def _body(req: falcon.Request, fields: tuple[str, ...]) -> dict[str, str]:
    """A JSON object body decoded as Go's json.Decoder into a struct of string fields; APIError(400) with Go's
    text otherwise."""
    data = req.bounded_stream.read()
    if not data.strip():
        raise APIError(400, "EOF")
    try:
        decoded = decode_struct(data, {name: (str, 0) for name in fields})
    except GoJSONError as err:
        raise api_error(400, str(err)) from None
    return {name: decoded.get(name, "") for name in fields}


class AdminAPI:
    """One responder per route and method (Falcon suffixes); each returns a view's dict or raises APIError."""

    def __init__(self, views: Views, notifier: Notifier) -> None:
        self.views = views
        self.opts: AdminOptions = views.opts
        self.notifier = notifier

    def _require_admin(self, req: falcon.Request) -> None:
        """Go's isAuthorizedAdminRequest: with --admin-user, the ACL header must name one of them."""
        users = self.opts.admin_users
        if users and (req.get_header(self.opts.acl_http_header) or "") not in users:
            raise APIError(403, "FORBIDDEN")

    def _notify(self, req: falcon.Request, action: str, topic: str, channel: str = "", node: str = "") -> None:
        self.notifier.notify(action, topic, channel, node, req.env)

    def on_get_ping(self, req: falcon.Request, resp: falcon.Response) -> str:
        return "OK"

    # --- views --------------------------------------------------------------------------------------------------

    def on_get_topics(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        return self.views.topics(inactive=req.get_param("inactive") == "true")

    def on_get_topic(self, req: falcon.Request, resp: falcon.Response, topic: str) -> dict[str, Any]:
        return go_numbers(self.views.topic(topic))

    def on_get_channel(self, req: falcon.Request, resp: falcon.Response, topic: str, channel: str) -> dict[str, Any]:
        return go_numbers(self.views.channel(topic, channel))

    def on_get_nodes(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        return self.views.nodes()

    def on_get_node(self, req: falcon.Request, resp: falcon.Response, node: str) -> dict[str, Any]:
        return go_numbers(self.views.node(node))

    def on_get_counter(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        return self.views.counter()

    def on_get_graphite(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        return self.views.graphite_rate(req.get_param("metric"), req.get_param("target"))

    # --- actions ------------------------------------------------------------------------------------------------

    def on_post_topics(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        self._require_admin(req)
        body = _body(req, ("topic", "channel"))
        topic, channel = body["topic"], body["channel"]
        if not is_valid_name(topic):
            raise APIError(400, "INVALID_TOPIC")
        if channel and not is_valid_name(channel):
            raise APIError(400, "INVALID_CHANNEL")
        answer = self.views.create_topic_channel(topic, channel)
        self._notify(req, "create_topic", topic)
        if channel:
            self._notify(req, "create_channel", topic, channel)
        return answer

    def on_post_topic(self, req: falcon.Request, resp: falcon.Response, topic: str) -> dict[str, Any]:
        return self._topic_channel_action(req, topic, "")

    def on_post_channel(self, req: falcon.Request, resp: falcon.Response, topic: str, channel: str) -> dict[str, Any]:
        return self._topic_channel_action(req, topic, channel)

    def _topic_channel_action(self, req: falcon.Request, topic: str, channel: str) -> dict[str, Any]:
        """Go notifies before it reports the outcome, so a failed action is notified too."""
        self._require_admin(req)
        action = _body(req, ("action",))["action"]
        if action not in ACTIONS:
            raise APIError(400, "INVALID_ACTION")
        try:
            return self.views.topic_channel_action(action, topic, channel)
        finally:
            self._notify(req, f"{action}_{'channel' if channel else 'topic'}", topic, channel)

    def on_delete_topic(self, req: falcon.Request, resp: falcon.Response, topic: str) -> dict[str, Any]:
        self._require_admin(req)
        answer = self.views.delete_topic(topic)
        self._notify(req, "delete_topic", topic)
        return answer

    def on_delete_channel(self, req: falcon.Request, resp: falcon.Response, topic: str,
                          channel: str) -> dict[str, Any]:
        self._require_admin(req)
        answer = self.views.delete_channel(topic, channel)
        self._notify(req, "delete_channel", topic, channel)
        return answer

    def on_delete_node(self, req: falcon.Request, resp: falcon.Response, node: str) -> dict[str, Any]:
        self._require_admin(req)
        try:
            topic = _body(req, ("topic",))["topic"]
        except APIError:
            raise APIError(400, "INVALID_BODY") from None
        if not is_valid_name(topic):
            raise APIError(400, "INVALID_TOPIC")
        answer = self.views.tombstone_node_for_topic(node, topic)
        self._notify(req, "tombstone_topic_producer", topic, node=node)
        return answer

    # --- /config ------------------------------------------------------------------------------------------------

    def _check_config_peer(self, req: falcon.Request) -> None:
        cidr = self.opts.allow_config_from_cidr
        if not cidr:
            return
        try:
            peer = ipaddress.ip_address(req.env.get("REMOTE_ADDR", ""))
        except ValueError:
            self.views.logger.error(f"failed to parse RemoteAddr {req.env.get('REMOTE_ADDR', '')}")
            raise APIError(400, "INVALID_REMOTE_ADDR") from None
        if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
            peer = peer.ipv4_mapped
        if peer not in ipaddress.ip_network(cidr, strict=False):
            raise APIError(403, "FORBIDDEN")

    def on_get_config(self, req: falcon.Request, resp: falcon.Response, opt: str) -> Any:
        self._check_config_peer(req)
        return config_value(self.opts, opt)

    def on_put_config(self, req: falcon.Request, resp: falcon.Response, opt: str) -> Any:
        """`nsqlookupd_http_addresses` (a JSON array) and `log_level` change live; the answer is the new value."""
        self._check_config_peer(req)
        body = req.bounded_stream.read(_MAX_CONFIG_BODY + 1)
        if not body or len(body) > _MAX_CONFIG_BODY:
            raise APIError(413, "INVALID_VALUE")
        if opt == "nsqlookupd_http_addresses":
            try:
                addresses = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise APIError(400, "INVALID_VALUE") from None
            if addresses is not None and (not isinstance(addresses, list)
                                          or not all(isinstance(a, str) for a in addresses)):
                raise APIError(400, "INVALID_VALUE")
            self.opts.nsqlookupd_http_addresses = addresses or []
        elif opt == "log_level":
            level = _LOG_LEVELS.get(body.decode("utf-8", "replace").lower())
            if level is None:
                raise APIError(400, "INVALID_VALUE")
            self.opts.log_level = level
            self.views.logger.level = level
        else:
            raise APIError(400, "INVALID_OPTION")
        return config_value(self.opts, opt)


def config_value(opts: AdminOptions, opt: str) -> Any:
    """An option by its TOML key, as Go's getOptByCfgName finds it (the raw value: durations in ns)."""
    attr = toml_keys(AdminOptions).get(opt)
    if attr is None:
        raise APIError(400, "INVALID_OPTION")
    return getattr(opts, attr)
