"""nsqd's access log line (`http_api.Log`): `<status> <METHOD> <uri> (<remote addr>) <elapsed>` at INFO.

The status is the handler's own (200, or its APIError's code), and the time is the handler's, before the
response is written, exactly where nsqd measures it. /pub, /mpub, OPTIONS and redirects are not logged.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

from ..go.durations import format_duration
from ..go.gocompat import join_host_port
from ..runtime.log import INFO, Logger
from .responses import APIError, Handler

if TYPE_CHECKING:
    import falcon


def logged(handler: Handler, logger: Logger) -> Handler:
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
        except Exception:
            status = 500
            raise
        finally:
            log_access(logger, status, req.method, req.env, start)

    return wrapper


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
