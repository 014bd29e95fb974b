"""Asking an NSQ auth server what a client's secret allows (nsqd's internal/auth).

The reply names an identity and authorizations: a topic regex, channel regexes and the
permissions `subscribe` / `publish`. Regexes match anywhere in the name (Go's MatchString). TCP keeps a client's
answer on its connection; HTTP (beyond nsqd, http_api/http_auth.py) keeps them in an `AuthCache`.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
import orjson

from ..config.options import Options
from ..go.gocompat import NSQ_ACCEPT
from ..runtime.log import Logger

_PERMISSIONS = {"subscribe", "publish"}


class AuthError(Exception):
    """The auth server could not be asked, or its answer was unusable (the client sees E_AUTH_FAILED)."""


class AuthRefused(AuthError):
    """The auth server turned the secret down (401 or 403): over TCP the same E_AUTH_FAILED, over HTTP a 401
    where a server that is down or answers garbage is a 503."""

    REFUSING = (401, 403)


@dataclass(slots=True)
class Authorization:
    topic: re.Pattern[str]
    channels: list[re.Pattern[str]]
    permissions: list[str]

    def is_allowed(self, topic: str, channel: str) -> bool:
        """Publishing is asked with channel "" (so a channel regex must match "", e.g. `.*`)."""
        needed = "subscribe" if channel else "publish"
        if needed not in self.permissions or not self.topic.search(topic):
            return False
        return any(pattern.search(channel) for pattern in self.channels)

    def may_subscribe_topic(self, topic: str) -> bool:
        """Subscribe on ``topic`` as a whole (beyond nsqd, HTTP's /topic/peek and /stats): no channel to match."""
        return "subscribe" in self.permissions and bool(self.topic.search(topic))


@dataclass(slots=True)
class AuthState:
    identity: str
    identity_url: str
    authorizations: list[Authorization]
    expires: float = field(default=0.0)

    def is_expired(self, now: float) -> bool:
        return self.expires < now

    def is_allowed(self, topic: str, channel: str) -> bool:
        return any(a.is_allowed(topic, channel) for a in self.authorizations)

    def may_subscribe_topic(self, topic: str) -> bool:
        return any(a.may_subscribe_topic(topic) for a in self.authorizations)

    def has_permission(self, permission: str) -> bool:
        """Some authorization grants ``permission`` (on some topic)."""
        return any(permission in a.permissions for a in self.authorizations)


@dataclass(slots=True)
class AuthServers:
    """The configured --auth-http-address values and how to reach them."""

    addresses: list[str]
    method: str
    connect_timeout: float
    request_timeout: float
    logger: Logger
    #: the monotonic clock answers expire by (a test advances its own instead of sleeping through a ttl)
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def from_options(cls, opts: Options, logger: Logger) -> AuthServers | None:
        """The servers of --auth-http-address, None when there are none (no AUTH needed)."""
        if not opts.auth_http_addresses:
            return None
        return cls(list(opts.auth_http_addresses), opts.auth_http_request_method,
                   opts.http_client_connect_timeout / 1e9, opts.http_client_request_timeout / 1e9, logger)

    def query(self, remote_ip: str, tls: bool, common_name: str, secret: bytes) -> AuthState:
        """Ask the servers in turn from a random start; the first usable answer wins. When none answers, a refusal
        among their errors is raised before any other (the secret is bad, not the servers)."""
        start = random.randrange(len(self.addresses))
        error: AuthError = AuthError("no auth server configured")
        for i in range(len(self.addresses)):
            address = self.addresses[(start + i) % len(self.addresses)]
            try:
                return self._query_one(address, remote_ip, tls, common_name, secret)
            except AuthError as err:
                self.logger.error(f"Error: failed auth against {address} {err}")
                if not isinstance(error, AuthRefused):
                    error = err
        raise error

    def _query_one(self, address: str, remote_ip: str, tls: bool, common_name: str, secret: bytes) -> AuthState:
        """One query, on a pool of its own as requests.get had: with no retries, a kept-alive connection the server
        closed meanwhile would fail it. Redirects are followed (30 at most, as requests did)."""
        import urllib3  # here, not at the top: it costs start-up time, and most nsqd have no auth server

        endpoint = address if "://" in address else f"http://{address}/auth"
        params: dict[str, str | bytes] = {"common_name": common_name, "remote_ip": remote_ip, "secret": secret,
                                          "tls": "true" if tls else "false"}
        headers = {"Accept": NSQ_ACCEPT}
        pool = urllib3.PoolManager(timeout=urllib3.Timeout(connect=self.connect_timeout, read=self.request_timeout),
                                   retries=urllib3.Retry(total=None, connect=0, read=False, status=0, other=0,
                                                         redirect=30),
                                   **_ca_bundle())
        # like Go's http.Client.Timeout the limit covers the whole exchange, not each read
        deadline = gevent.Timeout(self.request_timeout, AuthError(f"request timed out after {self.request_timeout}s"))
        try:
            with deadline, pool:
                if self.method == "post":
                    body = {key: [value.decode("utf-8", "replace") if isinstance(value, bytes) else value]
                            for key, value in params.items()}
                    resp = pool.request("POST", endpoint, body=orjson.dumps(body),
                                        headers={**headers, "Content-Type": "application/json"})
                else:
                    resp = pool.request("GET", _with_query(endpoint, params), headers=headers)
        except urllib3.exceptions.MaxRetryError as err:  # its text has the URL, and a GET's URL has the secret
            raise AuthError(str(err.reason)) from None
        except urllib3.exceptions.HTTPError as err:
            raise AuthError(str(err)) from None
        if resp.status != 200:
            refused = AuthRefused if resp.status in AuthRefused.REFUSING else AuthError
            raise refused(f"got response {resp.status} {resp.data.decode('utf-8', 'replace')!r}")
        try:
            return parse_auth_reply(orjson.loads(resp.data), self.clock())
        except ValueError as err:
            raise AuthError(str(err)) from None


class AuthCache:
    """The answers of the auth servers by secret until their ttl, for HTTP requests (beyond nsqd), which have no
    connection to keep them on. Keyed by remote IP and TLS too, since the server's answer may depend on them; at
    most ``size`` answers (the expired go first, then the oldest). Refusals are not kept."""

    def __init__(self, servers: AuthServers, size: int = 10_000) -> None:
        self.servers = servers
        self.size = size
        self._states: dict[tuple[bytes, str, bool], AuthState] = {}

    def get(self, remote_ip: str, tls: bool, secret: bytes) -> AuthState:
        """The answer for ``secret``, asked again past its ttl (AuthError as `AuthServers.query` raises it)."""
        key = (secret, remote_ip, tls)
        now = self.servers.clock()
        state = self._states.get(key)
        if state is not None and not state.is_expired(now):
            return state
        self._states.pop(key, None)
        state = self.servers.query(remote_ip, tls, "", secret)
        if len(self._states) >= self.size:
            self._evict(now)
        self._states[key] = state
        return state

    def _evict(self, now: float) -> None:
        for key in [key for key, state in self._states.items() if state.is_expired(now)]:
            del self._states[key]
        while len(self._states) >= self.size:
            del self._states[next(iter(self._states))]


def _with_query(url: str, params: dict[str, str | bytes]) -> str:
    """``url`` with ``params`` encoded after the query it has (bytes percent-encoded as they are)."""
    from urllib.parse import urlencode, urlsplit, urlunsplit  # here: with ipaddress it costs every start ~2 ms

    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="&".join(q for q in (parts.query, urlencode(params)) if q)))


def _ca_bundle() -> dict[str, Any]:
    """The CA certificates requests verified auth servers with: $REQUESTS_CA_BUNDLE or $CURL_CA_BUNDLE, else
    certifi's (a directory is passed as one)."""
    import certifi  # with urllib3: only when a server is asked

    path = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or certifi.where()
    return {"ca_cert_dir": path} if os.path.isdir(path) else {"ca_certs": path}


def parse_auth_reply(data: object, now: float) -> AuthState:
    """Validate an auth server's JSON answer like nsqd (received at ``now``); ValueError says what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("auth reply is not a JSON object")
    authorizations = []
    for entry in data.get("authorizations") or []:
        if not isinstance(entry, dict):
            raise ValueError("authorization is not a JSON object")
        permissions = entry.get("permissions") or []
        for permission in permissions:
            if permission not in _PERMISSIONS:
                raise ValueError(f"unknown permission {permission}")
        topic = _compile(entry.get("topic", ""), "topic")
        channels = [_compile(c, "channel") for c in entry.get("channels") or []]
        authorizations.append(Authorization(topic, channels, list(permissions)))
    ttl = data.get("ttl", 0)
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0:
        raise ValueError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(str(data.get("identity", "")), str(data.get("identity_url", "")), authorizations,
                     now + ttl)


def _compile(pattern: object, what: str) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise ValueError(f"unable to compile {what} {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as err:
        raise ValueError(f'unable to compile {what} "{pattern}" {err}') from None
