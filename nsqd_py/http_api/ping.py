"""GET /ping: `ping` is its one implementation, which the Falcon route and the shortcut (shortcuts.py) both call.
It imports no Falcon, so the shortcut answers a process that is only pinged without loading it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.nsqd import NSQD
from ..web.responses import APIError

if TYPE_CHECKING:
    import falcon


#: beyond nsqd: what /ping answers, as a 503, while nsqd drains and is healthy
DRAINING = "NOK - draining"


def ping(nsqd: NSQD) -> str:
    """nsqd's health text, as a 500 when it is not healthy; beyond nsqd, a 503 while it drains, so that a load
    balancer or readiness probe sends it no new publishers."""
    health = nsqd.health()
    if not nsqd.is_healthy():
        raise APIError(500, health)
    if nsqd.draining:
        raise APIError(503, DRAINING)
    return health


class Ping:
    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> str:
        return ping(self.nsqd)
