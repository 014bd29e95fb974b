"""Admin-action notifications (Go's nsqadmin/notify.go): a JSON POST to --notification-http-endpoint for every
create, delete, pause, unpause, empty and tombstone, sent by one greenlet so that the action never waits on it.
"""

from __future__ import annotations

import base64
import binascii
import socket
import time
from typing import Any

import gevent
import gevent.queue
import orjson

from ..http_server.access_log import remote_address
from ..runtime.log import Logger
from .upstream import Client, UpstreamError


def basic_auth_user(authorization: str) -> str:
    """The user of a `Basic` Authorization header ("" for none or junk)."""
    scheme, _, encoded = authorization.partition(" ")
    if scheme != "Basic" or not encoded:
        return ""
    try:
        pair = base64.b64decode(encoded, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return ""
    user, sep, _ = pair.partition(":")
    return user if sep else ""


def admin_action(action: str, topic: str, channel: str, node: str, env: dict[str, Any]) -> dict[str, Any]:
    """Go's AdminAction for the request in ``env`` (`channel`, `node` and `user` left out when empty)."""
    host = env.get("HTTP_HOST") or env.get("SERVER_NAME", "")
    scheme = "https" if env.get("wsgi.url_scheme") == "https" or env.get("HTTP_X_SCHEME") == "https" else "http"
    query = env.get("QUERY_STRING", "")
    url = f"{scheme}://{host}{env.get('PATH_INFO', '/')}" + (f"?{query}" if query else "")
    body: dict[str, Any] = {"action": action, "topic": topic}
    if channel:
        body["channel"] = channel
    if node:
        body["node"] = node
    body["timestamp"] = int(time.time())
    user = basic_auth_user(env.get("HTTP_AUTHORIZATION", ""))
    if user:
        body["user"] = user
    body.update(remote_ip=remote_address(env), user_agent=env.get("HTTP_USER_AGENT", ""), url=url,
                via=socket.gethostname())
    return body


class Notifier:
    """Queues actions and POSTs them in order from one greenlet; does nothing without an endpoint."""

    def __init__(self, endpoint: str, client: Client, logger: Logger) -> None:
        self.endpoint = endpoint
        self.client = client
        self.logger = logger
        self._queue: gevent.queue.Queue[dict[str, Any] | None] = gevent.queue.Queue()
        self._worker: gevent.Greenlet[Any, None] | None = None

    def start(self) -> None:
        self._worker = gevent.spawn(self._run)

    def notify(self, action: str, topic: str, channel: str, node: str, env: dict[str, Any]) -> None:
        if self.endpoint:
            self._queue.put(admin_action(action, topic, channel, node, env))

    def stop(self, timeout: float) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then end the worker."""
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join(timeout)
            self._worker.kill()

    def _run(self) -> None:
        while (action := self._queue.get()) is not None:
            self.logger.info(f"POSTing notification to {self.endpoint}")
            try:
                self.client.post_json(self.endpoint, orjson.dumps(action))
            except UpstreamError as err:
                self.logger.error(f"failed to POST notification - {err}")
