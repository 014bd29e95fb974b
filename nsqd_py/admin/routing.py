"""nsqd's httprouter-like Router (http_api/routing.py), plus routes with several `{param}` segments, which
nsqadmin has (`/api/topics/{topic}/{channel}`) and nsqd does not, and HTML pages (``page=True``: the responder
returns its whole answer, not data for the JSON envelope). Redirects, 405s and 404s stay the Router's.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import falcon
from falcon.routing import map_http_methods

from ..http_api.responses import APIError, Handler, Responder, apply_answer, v1_error_answer
from ..http_api.routing import Router, _AnyMethod, _Route, logged
from ..runtime.log import Logger


class _SegmentsRoute(_Route):
    """A route whose `{name}` segments each match one non-empty path segment."""

    __slots__ = ()

    def _pattern(self, flags: int = 0) -> re.Pattern[str]:
        parts = re.split(r"(\{\w+\})", self.template)
        regex = "".join(f"(?P<{p[1:-1]}>[^/]+)" if p.startswith("{") else re.escape(p) for p in parts)
        return re.compile(regex + r"\Z", flags)

    def match(self, path: str) -> dict[str, str] | None:
        found = self._pattern().match(path)
        return found.groupdict() if found else None

    def match_folded(self, path: str) -> str | None:
        """``path`` with the route's own spelling of its fixed parts when only their case differs."""
        found = self._pattern(re.IGNORECASE).match(path)
        if found is None:
            return None
        params = found.groupdict()
        return re.sub(r"\{(\w+)\}", lambda m: params[m.group(1)], self.template)


class AdminRouter(Router):
    def add_route(self, uri_template: str, resource: object, *, suffix: str | None = None, log: bool = True,
                  plain: bool = False, **kwargs: object) -> None:
        page = kwargs.pop("page", False)
        super().add_route(uri_template, resource, suffix=suffix, log=log, plain=plain, **kwargs)
        route = self._routes[-1]
        if page:
            for method, handler in map_http_methods(resource, suffix=suffix).items():
                route.method_maps[method] = _AnyMethod(_page(logged(handler, self._logger), self._logger))
        if uri_template.count("{") > 1:
            self._routes[-1] = _SegmentsRoute(route.template, route.resource, route.prefix, route.param,
                                              route.method_maps)


def _page(handler: Handler, logger: Logger) -> Responder:
    """A responder whose handler returns (status, headers, body); an APIError or a crash answers as the API's."""

    @functools.wraps(handler)
    def responder(req: falcon.Request, resp: falcon.Response, **params: str) -> None:
        answer: Any
        try:
            answer = handler(req, resp, **params)
        except APIError as err:
            answer = v1_error_answer(err.code, err.text)
        except Exception as err:
            logger.error(f"panic in HTTP handler - {err!r}")
            answer = v1_error_answer(500, "INTERNAL_ERROR")
        apply_answer(resp, answer)

    return responder
