"""Small HTTP helpers for nsqd and nsqlookupd: discovery (`/lookup`, `/topics`) and nsqd's `/stats`."""

from __future__ import annotations

from typing import Any

from ..go.gocompat import NSQ_ACCEPT, join_host_port
from ..wire.http_auth import bearer_headers
from .errors import HTTPError

#: (connect, request) seconds, the Go tools' --http-client-connect-timeout / --http-client-request-timeout
DEFAULT_TIMEOUT = (2.0, 5.0)


def endpoint(address: str, path: str) -> str:
    """`host:port` (or a full `http://...` base) plus ``path``."""
    base = address if "://" in address else f"http://{address}"
    return base.rstrip("/") + path


def get_json(url: str, params: dict[str, str] | None = None, timeout: tuple[float, float] = DEFAULT_TIMEOUT,
             auth_secret: str = "") -> dict[str, Any]:
    """GET and decode a V1 JSON reply (a pre-1.0 `{"status_code", "data"}` envelope is unwrapped); ``auth_secret``
    goes as `Authorization: Bearer` (nsqd's --http-auth-required, beyond nsqd)."""
    import requests  # here: its 0.08 s import would be paid by every Spark process that imports the connector

    headers = {"Accept": NSQ_ACCEPT, **bearer_headers(auth_secret)}
    try:
        resp = requests.get(url, params=params, headers=headers, timeout=timeout)
    except requests.RequestException as err:
        raise HTTPError(f"GET {url} failed - {err}") from err
    if resp.status_code != 200:
        raise HTTPError(f"GET {resp.url} got status {resp.status_code}: {resp.text.strip()}", resp.status_code)
    try:
        doc = resp.json()
    except ValueError as err:
        raise HTTPError(f"GET {resp.url} returned invalid JSON - {err}") from err
    if isinstance(doc, dict) and "status_code" in doc and "data" in doc:
        doc = doc["data"]
    if not isinstance(doc, dict):
        raise HTTPError(f"GET {resp.url} returned unexpected JSON {doc!r}")
    return doc


def lookup_peers(lookupd: str, topic: str, timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> list[dict[str, Any]]:
    """The `producers` one lookupd lists for ``topic``; [] when it does not know the topic (404 TOPIC_NOT_FOUND)."""
    try:
        doc = get_json(endpoint(lookupd, "/lookup"), {"topic": topic}, timeout)
    except HTTPError as err:
        if err.status == 404:
            return []
        raise
    return list(doc.get("producers") or [])


def lookup_producers(lookupd: str, topic: str, timeout: tuple[float, float] = DEFAULT_TIMEOUT, *,
                     port: str = "tcp_port") -> list[str]:
    """`broadcast_address:tcp_port` (or ``port="http_port"``) of every nsqd that has ``topic`` according to one
    lookupd."""
    return [join_host_port(p["broadcast_address"], p[port]) for p in lookup_peers(lookupd, topic, timeout)]


def lookupd_topics(lookupds: list[str], timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> list[str]:
    """Union of `/topics` over the lookupds, sorted; raises only if every lookupd failed."""
    topics: set[str] = set()
    errors = []
    for lookupd in lookupds:
        try:
            topics.update(get_json(endpoint(lookupd, "/topics"), None, timeout).get("topics") or [])
        except HTTPError as err:
            errors.append(str(err))
    if errors and len(errors) == len(lookupds):
        raise HTTPError("; ".join(errors))
    return sorted(topics)


def nsqd_stats(address: str, topic: str = "", channel: str = "", *, include_clients: bool = True,
               timeout: tuple[float, float] = DEFAULT_TIMEOUT, auth_secret: str = "") -> dict[str, Any]:
    """nsqd's `/stats?format=json`, optionally filtered to one topic/channel."""
    params = {"format": "json"}
    if topic:
        params["topic"] = topic
    if channel:
        params["channel"] = channel
    if not include_clients:
        params["include_clients"] = "false"
    return get_json(endpoint(address, "/stats"), params, timeout, auth_secret)
