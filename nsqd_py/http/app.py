"""The Falcon app of nsqd's HTTP API (a minimal start: /ping; the full API is issue 4)."""

from __future__ import annotations

import falcon

from ..core.nsqd import NSQD


class Ping:
    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = "text/plain; charset=utf-8"
        if self.nsqd.is_healthy():
            resp.text = "OK"
        else:
            resp.status = falcon.HTTP_500
            resp.text = self.nsqd.health()


def create_app(nsqd: NSQD) -> falcon.App:
    app = falcon.App()
    app.add_route("/ping", Ping(nsqd))
    return app
