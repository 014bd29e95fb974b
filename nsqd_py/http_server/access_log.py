"""The access log line of NSQ's `http_api.Log`: `<status> <METHOD> <uri> (<remote addr>) <elapsed>` at INFO.

The app writes it, not the server: nsqd times the handler alone, before the response is written
(web/router.py's `logged` for the Falcon routes, the /ping shortcut for itself).
"""

from __future__ import annotations

import time
from typing import Any

from ..go.durations import format_duration
from ..go.gocompat import join_host_port
from ..runtime.log import INFO, Logger


def log_access(logger: Logger, status: int, method: str, env: dict[str, Any], start_ns: int) -> None:
    """The line for one request whose handler started at ``start_ns`` (perf_counter_ns) and just ended."""
    if logger.level <= INFO:
        elapsed = format_duration(time.perf_counter_ns() - start_ns)
        logger.info(f"{status} {method} {request_uri(env)} ({remote_address(env)}) {elapsed}")


def request_uri(env: dict[str, Any]) -> str:
    """Go's `URL.RequestURI()`: the path and query as sent (servers that keep it put it in RAW_URI)."""
    raw = env.get("RAW_URI")
    if raw and raw.startswith("/"):
        return raw
    query = env.get("QUERY_STRING", "")
    return env.get("PATH_INFO", "/") + ("?" + query if query else "")


def remote_address(env: dict[str, Any]) -> str:
    """`ip:port` as Go prints a peer (`[v6]:port`, v4-mapped v6 shown as v4), `@` for a unix socket."""
    host = env.get("REMOTE_ADDR")
    port = env.get("REMOTE_PORT")
    if not host or not port:
        return "@"
    if host.startswith("::ffff:"):
        host = host[7:]
    return join_host_port(host, port)
