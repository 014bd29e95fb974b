"""The HTTP client nsqadmin queries nsqd and nsqlookupd with (Go's internal/http_api Client): NSQ's Accept
header, the connect and request timeouts, the https retry on a `403 {"https_port": N}`, and Go's error texts,
since nsqadmin shows them to the user (`got response 404 Not Found "{\"message\":\"TOPIC_NOT_FOUND\"}"`).
Beyond nsqd, with a secret (`--http-auth-secret`) every query to nsqd and nsqlookupd carries it as
`Authorization: Bearer` (wire/http_auth.py); notifications do not.

`fan_out` runs one query per address in parallel greenlets and keeps the answers in address order, so one dead
node costs a request at most the client timeouts, never one timeout per node.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import gevent
import orjson
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    InsecureRequestWarning,
    NewConnectionError,
    ReadTimeoutError,
)

from ..go.gocompat import NSQ_ACCEPT, go_quote, join_host_port
from ..web.responses import status_line
from ..wire.http_auth import bearer_headers
from .plain_http import AnswerFailed, ConnectFailed, PlainHTTP

T = TypeVar("T")
R = TypeVar("R")


class UpstreamError(Exception):
    """One failed query, with Go's text for it."""


class Client:
    """Go's deadline transport: ``connect_timeout`` to connect, ``request_timeout`` for an answer. GETs from http://
    addresses go through plain_http.py, the rest (HTTPS, POSTs) through urllib3.

    urllib3 rather than requests: a query is a third of the cost (bench/bench_nsqadmin.py: requests' own layers took
    about 0.35 ms of every upstream call, as much as the rest of an /api/topics answer)."""

    def __init__(self, connect_timeout: float, request_timeout: float, *, verify: bool | str = True,
                 cert: tuple[str, str] | None = None, auth_secret: str = "") -> None:
        #: (connect, request) seconds, for the graphite proxy's requests too
        self.timeout = (connect_timeout, request_timeout)
        tls: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED" if verify else "CERT_NONE"}
        if isinstance(verify, str):
            tls["ca_certs"] = verify
        if not verify:
            urllib3.disable_warnings(InsecureRequestWarning)  # --http-client-tls-insecure-skip-verify asked for it
        if cert is not None:
            tls["cert_file"], tls["key_file"] = cert
        #: the headers of every query (not of notifications)
        self.headers = {"Accept": NSQ_ACCEPT, **bearer_headers(auth_secret)}
        #: GETs from plain http:// addresses (nearly all of them): plain_http.py says why
        self.plain = PlainHTTP(connect_timeout, request_timeout, self.headers)
        #: maxsize: the greenlets of a page may ask one node several things at once; keep those connections too
        self.pool = urllib3.PoolManager(maxsize=16, retries=False, headers={"Accept": NSQ_ACCEPT},
                                        timeout=urllib3.Timeout(connect=connect_timeout, read=request_timeout),
                                        **tls)

    def get_json(self, endpoint: str) -> Any:
        """GET ``endpoint`` and decode its JSON answer (Go's GETV1)."""
        body = self._request("GET", endpoint)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as err:
            raise UpstreamError(f"invalid character in JSON answer from {endpoint} - {err}") from None

    def post(self, endpoint: str) -> None:
        """POST to ``endpoint`` with no body (Go's POSTV1)."""
        self._request("POST", endpoint)

    def post_json(self, endpoint: str, body: bytes) -> None:
        """POST a JSON body, whatever the answer (notifications)."""
        try:
            self.pool.request("POST", endpoint, body=body, headers={"Content-Type": "application/json",
                                                                     "Accept": NSQ_ACCEPT})
        except HTTPError as err:
            raise UpstreamError(_go_error("POST", endpoint, err)) from None

    def _request(self, method: str, endpoint: str) -> bytes:
        while True:
            if method == "GET" and endpoint.startswith("http://"):
                status, body = self._get_plain(endpoint)
            else:
                try:
                    resp = self.pool.request(method, endpoint, headers=self.headers)
                except HTTPError as err:
                    raise UpstreamError(_go_error(method, endpoint, err)) from None
                status, body = resp.status, resp.data
            if status == 200:
                return body
            if status == 403 and not endpoint.startswith("https"):
                endpoint = _https_endpoint(endpoint, body)
                continue
            raise UpstreamError(f"got response {status_line(status)} {go_quote(body)}")

    def _get_plain(self, endpoint: str) -> tuple[int, bytes]:
        parts = urlsplit(endpoint)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            return self.plain.get(parts.hostname or "", parts.port or 80, target)
        except ConnectFailed as err:
            raise UpstreamError(_dial_error("Get", endpoint, err.cause, err.cause)) from None
        except AnswerFailed as err:
            if err.timed_out:
                raise UpstreamError(_deadline_error("Get", endpoint)) from None
            raise UpstreamError(f'Get "{endpoint}": {err.cause or "EOF"}') from None


def _https_endpoint(endpoint: str, body: bytes) -> str:
    """nsqd answers plain HTTP with 403 and its https_port under --tls-required: ask there instead."""
    try:
        port = int(orjson.loads(body)["https_port"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise UpstreamError(f"got response 403 Forbidden {go_quote(body)}") from None
    parts = urlsplit(endpoint)
    return urlunsplit(("https", join_host_port(parts.hostname or "", port), parts.path, parts.query, ""))


def _go_error(method: str, endpoint: str, err: HTTPError) -> str:
    """`Get "URL": dial tcp ADDR: connect: connection refused`, as Go's http.Client words it."""
    verb = method.capitalize()
    if isinstance(err, NewConnectionError):  # (a subclass of ConnectTimeoutError, so first)
        return _dial_error(verb, endpoint, _os_error(err), err)
    if isinstance(err, ConnectTimeoutError):
        return _dial_error(verb, endpoint, TimeoutError(), err)
    if isinstance(err, ReadTimeoutError):
        return _deadline_error(verb, endpoint)
    if _os_error(err) is None:
        return f'{verb} "{endpoint}": EOF'
    return f'{verb} "{endpoint}": {err}'


def _dial_error(verb: str, endpoint: str, cause: OSError | None, err: object) -> str:
    """A connection that could not be made: refused, timed out, or another OSError (or ``err``'s own text)."""
    address = urlsplit(endpoint).netloc
    if isinstance(cause, TimeoutError):
        return f'{verb} "{endpoint}": dial tcp {address}: i/o timeout'
    if cause is not None and cause.errno == errno.ECONNREFUSED:
        return f'{verb} "{endpoint}": dial tcp {address}: connect: connection refused'
    if cause is not None and cause.strerror:
        return f'{verb} "{endpoint}": dial tcp {address}: {cause.strerror.lower()}'
    return f'{verb} "{endpoint}": dial tcp {address}: {err}'


def _deadline_error(verb: str, endpoint: str) -> str:
    return f'{verb} "{endpoint}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'


def _os_error(err: BaseException) -> OSError | None:
    """The OSError at the bottom of urllib3's wrapping, if any."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current
        stack.extend((current.__cause__, current.__context__, *(a for a in current.args
                                                                 if isinstance(a, BaseException))))
        reason = getattr(current, "reason", None)
        if isinstance(reason, BaseException):
            stack.append(reason)
    return None


def fan_out(items: Sequence[T], query: Callable[[T], R]) -> list[R | UpstreamError]:
    """``query`` for every item at once (a greenlet each); the answers, or their UpstreamError, in item order."""
    def guarded(item: T) -> R | UpstreamError:
        try:
            return query(item)
        except UpstreamError as err:
            return err

    greenlets = [gevent.spawn(guarded, item) for item in items]
    gevent.joinall(greenlets, raise_error=True)
    return [greenlet.value for greenlet in greenlets]
