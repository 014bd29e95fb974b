"""GET /config/{opt} for every option nsqd has a flag for; PUT for `nsqlookupd_tcp_addresses` (the lookupd
loop then connects to new peers and drops removed ones) and `log_level` (takes effect at once).

Values are nsqd's internal ones: durations in ns, `log_level` as its number, `tls_min_version` as the TLS
code; JSON, except strings, which nsqd's V1 envelope sends raw as text. A PUT answers like a GET after it.

Beyond nsqd (RFC nsqio/nsq#1302), with drain mode on (`--sigterm=drain`): `PUT /config/drain` starts a drain and
`PUT /config/shutdown` a clean shutdown, each with any body or none, answered with an empty 200 (a GET of either is
Go's 400 INVALID_OPTION). Without it both get Go's answers, as any unknown option does.
"""

from __future__ import annotations

from typing import Any

import falcon
import orjson

from ..cluster.context import ServerContext
from ..config.options import DRAIN
from ..runtime.log import LEVELS_BY_NAME
from ..web.responses import APIError
from .body import read_body

#: the PUTs that act instead of setting an option (beyond nsqd)
_ACTIONS = ("drain", "shutdown")
#: lg.ParseLogLevel: these names in any case, nothing else (no "warning", no surrounding space).
_LOG_LEVELS = {name: LEVELS_BY_NAME[name] for name in ("debug", "info", "warn", "error", "fatal")}


class Config:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.nsqd = ctx.nsqd

    def on_get(self, req: falcon.Request, resp: falcon.Response, opt: str) -> Any:
        try:
            return self.nsqd.opts.to_config_value(opt)
        except KeyError:
            raise APIError(400, "INVALID_OPTION") from None

    def on_put(self, req: falcon.Request, resp: falcon.Response, opt: str) -> Any:
        """The body is read (and judged) before the option name, as nsqd does."""
        if opt in _ACTIONS and self.nsqd.opts.sigterm == DRAIN:
            self._act(opt)
            return None
        limit = self.nsqd.opts.max_msg_size
        body = read_body(req.stream, limit)
        if not body or len(body) > limit:
            raise APIError(413, "INVALID_VALUE")
        if opt == "nsqlookupd_tcp_addresses":
            addresses = _string_list(body)
            self.nsqd.opts.nsqlookupd_tcp_addresses = addresses
            if self.ctx.lookup is not None:  # nsqd's triggerOptsNotification: the lookup loop reconciles peers
                self.ctx.lookup.set_peers(addresses)
        elif opt == "log_level":
            level = _LOG_LEVELS.get(body.decode("utf-8", "replace").lower())
            if level is None:
                raise APIError(400, "INVALID_VALUE")
            self.nsqd.opts.log_level = level
            self.nsqd.logger.level = level
        else:
            raise APIError(400, "INVALID_OPTION")
        return self.on_get(req, resp, opt)

    def _act(self, action: str) -> None:
        if action == "drain":
            self.nsqd.drain()
        else:
            self.nsqd.logger.info("NSQ: shutdown requested (PUT /config/shutdown)")
            self.nsqd.request_stop()


def _string_list(body: bytes) -> list[str]:
    """A JSON array of strings. Go decodes `null` to a nil slice; we keep an empty list for the lookupd code."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise APIError(400, "INVALID_VALUE") from None
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise APIError(400, "INVALID_VALUE")
    return value
