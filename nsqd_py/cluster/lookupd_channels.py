"""Asking nsqlookupd which channels a topic has (nsqd's clusterinfo.GetLookupdTopicChannels), so that a new
topic can create them before its first message."""

from __future__ import annotations

from urllib.parse import quote

import gevent

from ..go.gocompat import NSQ_ACCEPT
from ..runtime.log import Logger


def lookupd_channels(topic: str, addresses: list[str], logger: Logger, connect_timeout: float,
                     request_timeout: float) -> tuple[list[str], list[str]]:
    """GET /channels?topic= on every lookupd at once (clusterinfo's GetLookupdTopicChannels):
    the sorted union of the channels, and the errors of the lookupds that failed."""
    jobs = [gevent.spawn(_get_channels, topic, address, logger, (connect_timeout, request_timeout))
            for address in addresses]
    gevent.joinall(jobs)
    channels: set[str] = set()
    errors = []
    for job in jobs:
        names, error = job.value
        channels.update(names)
        if error:
            errors.append(error)
    return sorted(channels), errors


def _get_channels(topic: str, address: str, logger: Logger, timeout: tuple[float, float]) -> tuple[list[str], str]:
    """(channels, "") or ([], error text)."""
    import requests  # here, not at the top: it costs start-up ~40 ms, and only a new topic with lookupd needs it

    url = f"http://{address}/channels?topic={quote(topic, safe='')}"
    logger.info(f"CI: querying nsqlookupd {url}")
    try:
        resp = requests.get(url, timeout=timeout, headers={"Accept": NSQ_ACCEPT})
    except requests.RequestException as err:
        return [], f"Get {url}: {err}"
    if resp.status_code != 200:
        return [], f"got response {resp.status_code} {resp.text!r}"
    try:
        channels = resp.json().get("channels") or []
    except (ValueError, AttributeError):
        return [], f"invalid JSON from {url}"
    return [name for name in channels if isinstance(name, str)], ""
