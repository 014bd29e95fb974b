"""The driver's HTTP calls to nsqd (the survey's `/stats` and channel calls, availableNow's clock), with the security
settings of the reads.

The scheme: an address written `https://host:port` (in `nsqdHttpAddresses`) is asked over HTTPS; any other (a bare
`host:port`, `http://...`, the TCP port + 1, lookupd's `http_port`) over plain HTTP, which is what nsqd's HTTP port
speaks (its HTTPS listener is `--https-address`, another port). nsqd with `--tls-required=tcp-https` still answers
plain HTTP; with `--tls-required` it answers 403 `{"message": "TLS_REQUIRED", "https_port": N}`, and then, as Go's
nsqadmin does, the call goes to HTTPS on that port of the same host, and so do the later calls to that nsqd. With
`tls=false` that answer fails the query instead: its reads could not work either.

HTTPS verifies nsqd as the reads do: `tlsCaFile` (default: the system's CAs), `tlsServerName`,
`tlsInsecureSkipVerify`, and presents `tlsCertFile`/`tlsKeyFile`. A TLS refusal (a certificate that does not verify,
a client certificate nsqd wants) is a `ConnectionConfigError`: the query fails at once, while an nsqd that does not
answer is skipped (failOnUnreachable).
"""

from __future__ import annotations

import json
import ssl
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3

from ..client.errors import HTTPError
from ..client.http import endpoint
from ..go.gocompat import NSQ_ACCEPT, join_host_port
from .connect import ConnectionConfigError, ssl_context
from .options import ConnectOptions, OptionError

#: nsqd's HTTP address (as the survey knows it) -> the HTTPS base its 403 TLS_REQUIRED named
_https_of: dict[str, str] = {}


def base_url(http: str) -> str:
    """Where calls to the nsqd at ``http`` go: the HTTPS base it named, once it refused plain HTTP."""
    return _https_of.get(http, http)


def http_pool(url: str, connect: ConnectOptions, timeout: tuple[float, float]) -> urllib3.PoolManager:
    """A pool for one call or one series of calls to ``url``'s nsqd: (connect, read) ``timeout``, no retries,
    redirects followed (30 at most); for https, the TLS settings of the reads."""
    tls: dict[str, Any] = {}
    if urlsplit(endpoint(url, "")).scheme == "https":
        tls["ssl_context"] = ssl_context(connect)
        if connect.tls_server_name:
            tls.update(server_hostname=connect.tls_server_name, assert_hostname=connect.tls_server_name)
    return urllib3.PoolManager(timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
                               retries=urllib3.Retry(total=None, connect=0, read=False, status=0, other=0, redirect=30),
                               **tls)


def send(pool: urllib3.PoolManager, method: str, url: str) -> urllib3.BaseHTTPResponse:
    """One request; a TLS refusal raises ConnectionConfigError, any other failure HTTPError."""
    try:
        return pool.request(method, url, headers={"Accept": NSQ_ACCEPT})
    except urllib3.exceptions.HTTPError as err:
        refusal = _tls_refusal(err)
        if refusal is not None:
            raise ConnectionConfigError(
                f"TLS with nsqd's HTTP API at {url.partition('?')[0]} failed: {refusal} (check 'tlsCaFile', "
                f"'tlsServerName', 'tlsCertFile'/'tlsKeyFile', 'tlsInsecureSkipVerify', and that an https:// address "
                f"in 'nsqdHttpAddresses' is nsqd's --https-address)") from None
        raise HTTPError(f"{method} {url.partition('?')[0]} failed - {err}") from err


def request(method: str, http: str, path: str, params: dict[str, str], connect: ConnectOptions,
            timeout: tuple[float, float]) -> urllib3.BaseHTTPResponse:
    """``method`` ``path`` on the nsqd at ``http``, over HTTPS once it refused plain HTTP (see the module's doc)."""
    query = f"?{urlencode(params)}" if params else ""
    learnt = connect.tls and http in _https_of  # without tls, nsqd's 403 tells why the query cannot read
    url = endpoint(_https_of[http] if learnt else http, path) + query
    try:
        with http_pool(url, connect, timeout) as pool:
            resp = send(pool, method, url)
    except HTTPError:
        _https_of.pop(http, None)  # nsqd may have restarted with other settings: ask its plain HTTP again
        raise
    https = None if url.startswith("https://") else _tls_required(resp)
    if https is None:
        return resp
    if not connect.tls:
        raise OptionError(f"nsqd {http} requires TLS (its --tls-required): set 'tls' to true, with 'tlsCaFile' "
                          f"for a certificate the system does not trust")
    _https_of[http] = f"https://{join_host_port(urlsplit(endpoint(http, '')).hostname or '', https)}"
    return request(method, _https_of[http], path, params, connect, timeout)


def get_json(http: str, path: str, params: dict[str, str], connect: ConnectOptions,
             timeout: tuple[float, float]) -> dict[str, Any]:
    """GET a V1 JSON answer (a pre-1.0 `{"status_code", "data"}` envelope is unwrapped)."""
    resp = request("GET", http, path, params, connect, timeout)
    where = f"GET {endpoint(base_url(http), path)}"
    if resp.status != 200:
        raise HTTPError(f"{where} got status {resp.status}: {resp.data.decode('utf-8', 'replace').strip()}",
                        resp.status)
    try:
        doc = json.loads(resp.data)
    except ValueError as err:
        raise HTTPError(f"{where} returned invalid JSON - {err}") from err
    if isinstance(doc, dict) and "status_code" in doc and "data" in doc:
        doc = doc["data"]
    if not isinstance(doc, dict):
        raise HTTPError(f"{where} returned unexpected JSON {doc!r}")
    return doc


def post(http: str, path: str, params: dict[str, str], connect: ConnectOptions, timeout: tuple[float, float]) -> None:
    resp = request("POST", http, path, params, connect, timeout)
    if resp.status != 200:
        raise HTTPError(f"POST {endpoint(base_url(http), path)}?{urlencode(params)} got status {resp.status}: "
                        f"{resp.data.decode('utf-8', 'replace').strip()}", resp.status)


def _tls_required(resp: urllib3.BaseHTTPResponse) -> int | None:
    """The https_port of nsqd's 403 TLS_REQUIRED answer to plain HTTP, else None."""
    if resp.status != 403:
        return None
    try:
        answer = json.loads(resp.data)
        return int(answer["https_port"]) if answer.get("message") == "TLS_REQUIRED" else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _tls_refusal(err: BaseException) -> ssl.SSLError | None:
    """The TLS refusal behind a urllib3 error (its reason, or an argument, at any depth); not an EOF, which a node
    going down mid-handshake gives too."""
    causes: list[object] = [err]
    while causes:
        cause = causes.pop()
        if isinstance(cause, ssl.SSLError):
            return None if isinstance(cause, ssl.SSLEOFError | ssl.SSLZeroReturnError) else cause
        if isinstance(cause, BaseException):
            causes.extend((getattr(cause, "reason", None), *cause.args))
    return None
