"""Auth on nsqd's HTTP API (beyond nsqd, `--http-auth-required`; docs/operations.md, "Auth on the HTTP API").

`HTTPAuth` is a WSGI app in front of the shortcuts and the Falcon routes (app.py), so every request, the /pub and
/ping shortcuts included, passes it first; without the flag app.py leaves it out and nothing changes. A request
carries `Authorization: Bearer <secret>`; the secret goes to the auth servers of --auth-http-address as a TCP
AUTH's does (remote IP, tls, no common name), their answer is kept until its ttl (cluster/auth.py's AuthCache),
and its authorizations are matched as TCP matches them (`AuthState.is_allowed`).

What a path needs is its row in `RULES`; a path without one (`/config/...`, an unknown path, a route added
later) needs the `--http-admin-identity`. A topic and channel are read from the query as the handlers read them
(the first `topic=` and `channel=`); a query Go cannot parse names neither, so it is refused here (403) unless the
path needs nothing of a topic. A settings change that sets `dead_letter_topic` or `max_attempts` also needs publish on
the dead-letter topic it sends messages to.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ..cluster.auth import AuthCache, AuthError, AuthRefused, AuthState
from ..cluster.context import ServerContext
from ..config.queue_settings import TOPIC_PLACEHOLDER
from ..core.stats import Stats
from ..http_server.access_log import log_access, remote_address
from ..http_server.server import WSGIApp
from ..runtime.log import Logger
from ..web.params import first, parse_query
from ..web.responses import APIError, v1_error_answer
from ..wire.http_auth import SCHEME, bearer_secret

#: the environ key under which the routes find the caller's AuthState (status.py's /stats filters by it)
AUTH_STATE = "nsqd_py.auth_state"

OPEN = "open"  # no secret needed: health checks
PUBLISH = "publish"  # publish on the topic
SUBSCRIBE = "subscribe"  # subscribe on the channel (channel routes) or on the topic
BOTH = "publish+subscribe"
VISIBLE = "visible"  # subscribe on something; the answer shows only what may be subscribed (/stats)
ADMIN = "admin"  # the --http-admin-identity

_QUEUE_ACTIONS = ("create", "delete", "empty", "pause", "unpause")

RULES: dict[str, str] = {
    "/ping": OPEN,
    "/info": OPEN,
    "/pub": PUBLISH,
    "/mpub": PUBLISH,
    "/stats": VISIBLE,
    "/topic/peek": SUBSCRIBE,
    "/channel/peek": SUBSCRIBE,
    **{f"/{kind}/{action}": BOTH for kind in ("topic", "channel") for action in _QUEUE_ACTIONS},
    "/channel/reset": BOTH,
    "/topic/settings": BOTH,
    "/channel/settings": BOTH,
    "/metrics": ADMIN,  # every topic and channel, unfiltered
}
#: where a GET needs less than the path's row: reading the settings shows them, as /stats does
GET_RULES: dict[str, str] = {"/topic/settings": SUBSCRIBE, "/channel/settings": SUBSCRIBE}


def rule(method: str, path: str) -> str:
    """What ``method`` on ``path`` needs (ADMIN where the table has no row)."""
    if method == "GET" and path in GET_RULES:
        return GET_RULES[path]
    return RULES.get(path, ADMIN)


class HTTPAuth:
    """The gate: refusals are answered here in nsqd's JSON error shape and access-logged (never the secret); what
    passes goes to ``app`` with the caller's AuthState in the environ."""

    def __init__(self, app: WSGIApp, cache: AuthCache, admin_identity: str, logger: Logger,
                 dead_letter_template: str = "{topic}.dead") -> None:
        self._app = app
        self._cache = cache
        self._admin_identity = admin_identity
        self._logger = logger
        self._dead_letter_template = dead_letter_template  # --dead-letter-topic: where max_attempts sends them

    @classmethod
    def for_context(cls, ctx: ServerContext, app: WSGIApp) -> HTTPAuth:
        """options.validate made sure --auth-http-address is set, so there are servers to ask."""
        assert ctx.auth_servers is not None
        return cls(app, AuthCache(ctx.auth_servers), ctx.opts.http_admin_identity, ctx.logger,
                   ctx.opts.dead_letter_topic)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method: str = environ["REQUEST_METHOD"]
        path: str = environ["PATH_INFO"]
        need = rule(method, path)
        if need == OPEN:
            return self._app(environ, start_response)
        start = time.perf_counter_ns()
        try:
            state = self._authenticate(environ)
            self._authorize(state, need, path, environ.get("QUERY_STRING", ""))
        except APIError as err:
            log_access(self._logger, err.code, method, environ, start)
            status, headers, body = v1_error_answer(err.code, err.text)
            if err.code in (400, 401):
                headers.append(("WWW-Authenticate", SCHEME))
            start_response(status, headers)
            return (body,)
        environ[AUTH_STATE] = state
        return self._app(environ, start_response)

    def _authenticate(self, environ: dict[str, Any]) -> AuthState:
        header = environ.get("HTTP_AUTHORIZATION")
        if header is None:
            raise APIError(401, "AUTH_REQUIRED")
        secret = bearer_secret(header)
        if secret is None:
            raise APIError(400, "INVALID_AUTH_HEADER - want Bearer <secret>")
        address = remote_address(environ)
        remote_ip = "" if address == "@" else address.rsplit(":", 1)[0].strip("[]")
        tls = environ.get("wsgi.url_scheme") == "https"
        try:  # WSGI hands header bytes over as latin-1 text: the secret goes out as the bytes sent
            return self._cache.get(remote_ip, tls, secret.encode("latin-1"))
        except AuthRefused:
            raise APIError(401, "AUTH_FAILED") from None
        except AuthError:  # the servers' errors are logged by AuthServers.query (without the secret)
            raise APIError(503, "AUTH_UNAVAILABLE") from None

    def _authorize(self, state: AuthState, need: str, path: str, query_string: str) -> None:
        if need == ADMIN:
            allowed = bool(self._admin_identity) and state.identity == self._admin_identity
        elif need == VISIBLE:
            allowed = state.has_permission("subscribe")
        else:
            try:
                query = parse_query(query_string)
            except ValueError:
                query = {}
            topic = first(query, "topic") or ""
            allowed = may(state, need, topic, first(query, "channel") or "", path.startswith("/channel/"))
            if allowed and path.endswith("/settings") and ("dead_letter_topic" in query or "max_attempts" in query):
                # dead letters will go there: the caller must be allowed to publish there too
                template = first(query, "dead_letter_topic") or self._dead_letter_template
                allowed = state.is_allowed(template.replace(TOPIC_PLACEHOLDER, topic), "")
        if not allowed:
            raise APIError(403, "UNAUTHORIZED")


def may(state: AuthState, need: str, topic: str, channel: str, on_channel: bool) -> bool:
    """PUBLISH, SUBSCRIBE or BOTH on ``topic`` (and ``channel`` for a channel route, which must name one)."""
    if need != SUBSCRIBE and not state.is_allowed(topic, ""):  # "" asks for publish, as TCP's PUB does
        return False
    if need == PUBLISH:
        return True
    if on_channel:
        return bool(channel) and state.is_allowed(topic, channel)
    return state.may_subscribe_topic(topic)


def visible_stats(stats: Stats, state: AuthState) -> Stats:
    """The /stats document with only the topics and channels ``state`` may subscribe to, and the producers whose
    published topics are among them; every row keeps its shape (a `null` stays `null`)."""
    topics = stats["topics"]
    producers = stats["producers"]
    shown = dict(stats)
    if topics is not None:
        shown["topics"] = [
            {**topic, "channels": [channel for channel in topic["channels"]
                                   if state.is_allowed(topic["topic_name"], channel["channel_name"])]}
            for topic in topics if state.may_subscribe_topic(topic["topic_name"])]
    if producers is not None:
        shown["producers"] = [producer for producer in producers
                              if all(state.may_subscribe_topic(count["topic"])
                                     for count in producer.get("pub_counts") or [])] or None
    return shown
