"""nsqd's httprouter-like Router (web/router.py), plus routes with several `{param}` segments, which nsqadmin has
(`/api/topics/{topic}/{channel}`) and nsqd does not, and HTML pages (``page=True``: the responder returns its whole
answer, not data for the JSON envelope). Redirects, 405s and 404s stay the Router's.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import falcon

from ..runtime.log import Logger
from ..web.responses import APIError, Handler, Responder, apply_answer, v1_error_answer
from ..web.router import Route, Router


class _SegmentsRoute(Route):
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
    def make_route(self, template: str, resource: object, prefix: str, param: str) -> Route:
        if template.count("{") > 1:
            return _SegmentsRoute(template, resource, prefix, param)
        return super().make_route(template, resource, prefix, param)

    def responder(self, handler: Handler, *, plain: bool, **kwargs: object) -> Responder:
        if kwargs.get("page"):
            return _page(handler, self._logger)
        return super().responder(handler, plain=plain, **kwargs)


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
