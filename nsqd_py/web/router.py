"""A Falcon router that routes like julienschmidt/httprouter, which nsqd's HTTP API runs on.

For a request the router returns the responder that answers it, so every outcome is decided in one place:

1. a route for the path and method: its responder;
2. `OPTIONS *`: 200 with no body (Go's server answers it before any router);
3. otherwise, when some route uses the method (httprouter keeps a tree per method) and the path is not `/`:
   the path with its trailing slash toggled, then the cleaned path matched case-insensitively, redirect
   there (301 for GET, 307 for anything else, so a POST stays a POST);
4. OPTIONS on a path other methods serve: 200 with `Allow`; any other method: 405 `METHOD_NOT_ALLOWED`
   with `Allow` (the sorted methods plus OPTIONS);
5. 404 `NOT_FOUND`.

HEAD is not routed (httprouter 1.3 has no HEAD fallback), so `HEAD /ping` is a 405, as from nsqd. Routes are
static paths or one trailing `{param}` segment, which is all nsqd has. Responders *return* their data (see
`responses`); `add_route` wraps them in nsqd's decorators: the access log (unless ``log=False``) and the V1
envelope (or plain text with ``plain=True``).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import falcon
from falcon.routing import map_http_methods

from ..http_server.access_log import log_access
from ..runtime.log import Logger
from .responses import HTML_TYPE, APIError, Handler, Responder, plain_text, status_line, v1

# Go's url.URL.EscapedPath leaves these alone in a path (on top of letters, digits and `-._~`).
_PATH_SAFE = "/$&+,:;=@"


class AnyMethod(dict):
    """A method map that answers every method, even ones Falcon does not know, with one responder."""

    __slots__ = ("responder",)

    def __init__(self, responder: Responder) -> None:
        super().__init__()
        self.responder = responder

    def __missing__(self, method: str) -> Responder:
        return self.responder


@dataclass(slots=True)
class Route:
    template: str
    resource: object
    prefix: str  # the whole path, or what comes before the parameter
    param: str  # "" for a static route
    method_maps: dict[str, AnyMethod] = field(default_factory=dict)

    def match(self, path: str) -> dict[str, str] | None:
        if not self.param:
            return {} if path == self.prefix else None
        if not path.startswith(self.prefix):
            return None
        value = path[len(self.prefix):]
        return {self.param: value} if value and "/" not in value else None

    def match_folded(self, path: str) -> str | None:
        """The route's own spelling of ``path`` when they differ only in case (a parameter keeps its case)."""
        head = path[: len(self.prefix)]
        if head.lower() != self.prefix.lower():
            return None
        rest = path[len(self.prefix):]
        if not self.param:
            return self.prefix if not rest else None
        return self.prefix + rest if rest and "/" not in rest else None


class Router:
    """Subclasses change how a route matches (`make_route`) or how a handler answers (`responder`)."""

    def __init__(self, logger: Logger, internal_errors: tuple[type[Exception], ...] = ()) -> None:
        """``internal_errors``: exceptions a handler may raise that answer 500 `INTERNAL_ERROR` (nsqd: a change
        nsqd.dat could not record), as an APIError would."""
        self._logger = logger
        self._internal_errors = internal_errors
        self._routes: list[Route] = []
        self._static: dict[str, Route] = {}
        self._not_found = AnyMethod(v1(logged(_not_found, logger), logger))
        self._not_allowed = AnyMethod(v1(logged(_method_not_allowed, logger), logger))
        self._options = AnyMethod(_options)
        self._global_options = AnyMethod(_global_options)
        self._redirect = AnyMethod(_redirect)

    def add_route(self, uri_template: str, resource: object, *, suffix: str | None = None, log: bool = True,
                  plain: bool = False, **kwargs: object) -> None:
        prefix, brace, rest = uri_template.partition("{")
        route = self.make_route(uri_template, resource, prefix, rest.rstrip("}") if brace else "")
        for method, handler in map_http_methods(resource, suffix=suffix).items():
            wrapped = logged(handler, self._logger, self._internal_errors) if log else handler
            route.method_maps[method] = AnyMethod(self.responder(wrapped, plain=plain, **kwargs))
        self._routes.append(route)
        if not route.param:
            self._static[prefix] = route

    def make_route(self, template: str, resource: object, prefix: str, param: str) -> Route:
        """The route for ``template``: static, or one trailing `{param}` segment (all nsqd has)."""
        return Route(template, resource, prefix, param)

    def responder(self, handler: Handler, *, plain: bool, **kwargs: object) -> Responder:
        """``handler`` wrapped in its answer: the V1 JSON envelope, or plain text."""
        return plain_text(handler, self._logger) if plain else v1(handler, self._logger)

    def find(self, uri: str, req: falcon.Request | None = None) -> tuple[object, AnyMethod, dict, str | None]:
        method = req.method if req is not None else "GET"
        route, params = self._match(uri)
        if route is not None:
            method_map = route.method_maps.get(method)
            if method_map is not None:
                return route.resource, method_map, params, route.template
        if uri == "*":
            if method == "OPTIONS":
                return self, self._global_options, {}, None
            return self, self._not_allowed, {"allow": self._allow(self._routes, "")}, None
        if method != "CONNECT" and uri != "/" and any(method in r.method_maps for r in self._routes):
            target = self._redirect_target(uri, method)
            if target is not None:
                code = 301 if method == "GET" else 307
                return self, self._redirect, {"location": _location(target, req), "code": code}, None
        allow = self._allow([route] if route is not None else [], method)
        if allow:
            return self, self._options if method == "OPTIONS" else self._not_allowed, {"allow": allow}, None
        return self, self._not_found, {}, None

    def _match(self, path: str) -> tuple[Route | None, dict[str, str]]:
        route = self._static.get(path)
        if route is not None:
            return route, {}
        for route in self._routes:
            params = route.match(path)
            if params is not None:
                return route, params
        return None, {}

    def _serves(self, path: str, method: str) -> bool:
        route, _ = self._match(path)
        return route is not None and method in route.method_maps

    def _redirect_target(self, path: str, method: str) -> str | None:
        toggled = path[:-1] if len(path) > 1 and path.endswith("/") else path + "/"
        if self._serves(toggled, method):
            return toggled
        cleaned = clean_path(path)
        toggled = cleaned[:-1] if len(cleaned) > 1 and cleaned.endswith("/") else cleaned + "/"
        for candidate in (cleaned, toggled):
            for route in self._routes:
                if method in route.method_maps:
                    fixed = route.match_folded(candidate)
                    if fixed is not None:
                        return fixed
        return None

    @staticmethod
    def _allow(routes: list[Route], method: str) -> str:
        """httprouter's `Allow`: the other methods served there, plus OPTIONS, sorted ("" when none)."""
        methods = {m for r in routes for m in r.method_maps if m not in (method, "OPTIONS")}
        return ", ".join(sorted({*methods, "OPTIONS"})) if methods else ""


def logged(handler: Handler, logger: Logger, internal_errors: tuple[type[Exception], ...] = ()) -> Handler:
    """nsqd's `http_api.Log` decorator: the access line with the handler's own status (200, or its APIError's
    code) and time, before the response is written, exactly where nsqd measures it. /pub, /mpub, OPTIONS and
    redirects are not logged."""

    @functools.wraps(handler)
    def wrapper(req: falcon.Request, resp: falcon.Response, **params: str) -> Any:
        start = time.perf_counter_ns()
        status = 200
        try:
            return handler(req, resp, **params)
        except APIError as err:
            status = err.code
            if err.log:  # nsqd writes it from inside the handler, so before the access line
                logger.error(err.log)
                err.log = ""
            raise
        except Exception as err:
            status = 500
            if isinstance(err, internal_errors):  # not done, and the handler knows: say so
                raise APIError(500, "INTERNAL_ERROR") from None
            raise
        finally:
            log_access(logger, status, req.method, req.env, start)

    return wrapper


def falcon_app(router: Router, middleware: list[object] | None = None) -> falcon.App:
    """A Falcon app on ``router``, with no default media type (every answer sets its own, as nsqd's do).
    Falcon takes both at run time; its type hints ask for a str and a CompiledRouter subclass."""
    return falcon.App(media_type=None, router=router, middleware=middleware)  # type: ignore[call-overload]


def clean_path(path: str) -> str:
    """httprouter's CleanPath: path.Clean that keeps a trailing slash, always rooted."""
    parts: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if parts:
                parts.pop()
        elif segment and segment != ".":
            parts.append(segment)
    cleaned = "/" + "/".join(parts)
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def _location(path: str, req: falcon.Request | None) -> str:
    location = quote(path, safe=_PATH_SAFE)  # Falcon has decoded the path as UTF-8
    query = req.query_string if req is not None else ""
    return f"{location}?{query}" if query else location


def _go_html_escape(text: str) -> str:
    return (text.replace("&", "&amp;").replace("'", "&#39;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&#34;"))


def _not_found(req: falcon.Request, resp: falcon.Response) -> None:
    raise APIError(404, "NOT_FOUND")


def _method_not_allowed(req: falcon.Request, resp: falcon.Response, allow: str) -> None:
    resp.set_header("Allow", allow)
    raise APIError(405, "METHOD_NOT_ALLOWED")


def _options(req: falcon.Request, resp: falcon.Response, allow: str) -> None:
    resp.status = status_line(200)
    resp.set_header("Allow", allow)
    resp.data = b""


def _global_options(req: falcon.Request, resp: falcon.Response) -> None:
    resp.status = status_line(200)
    resp.data = b""


def _redirect(req: falcon.Request, resp: falcon.Response, location: str, code: int) -> None:
    """Go's `http.Redirect`: only a GET gets the little HTML body."""
    resp.status = status_line(code)
    resp.set_header("Location", location)
    if req.method == "GET":
        resp.content_type = HTML_TYPE
        resp.data = f'<a href="{_go_html_escape(location)}">{status_line(code)[4:]}</a>.\n\n'.encode()
    else:
        resp.data = b""
