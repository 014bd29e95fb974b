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
    """(channels, "") or ([], error text). A pool of its own per query, as requests.get had (nothing retries)."""
    import urllib3  # here, not at the top: it costs start-up time, and only a new topic with lookupd needs it

    url = f"http://{address}/channels?topic={quote(topic, safe='')}"
    logger.info(f"CI: querying nsqlookupd {url}")
    try:
        with urllib3.PoolManager(timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
                                 retries=urllib3.Retry(total=None, connect=0, read=False, status=0, other=0,
                                                       redirect=30)) as pool:
            resp = pool.request("GET", url, headers={"Accept": NSQ_ACCEPT})
    except urllib3.exceptions.HTTPError as err:
        return [], f"Get {url}: {err}"
    if resp.status != 200:
        return [], f"got response {resp.status} {resp.data.decode('utf-8', 'replace')!r}"
    try:
        channels = resp.json().get("channels") or []
    except (ValueError, AttributeError):
        return [], f"invalid JSON from {url}"
    return [name for name in channels if isinstance(name, str)], ""
