"""nsqd's httprouter-like Router (http_api/routing.py), plus routes with several `{param}` segments, which
nsqadmin has (`/api/topics/{topic}/{channel}`) and nsqd does not. Redirects, 405s and 404s stay the Router's.
"""

from __future__ import annotations

import re

from ..http_api.routing import Router, _Route


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
        super().add_route(uri_template, resource, suffix=suffix, log=log, plain=plain, **kwargs)
        if uri_template.count("{") > 1:
            route = self._routes[-1]
            self._routes[-1] = _SegmentsRoute(route.template, route.resource, route.prefix, route.param,
                                              route.method_maps)
