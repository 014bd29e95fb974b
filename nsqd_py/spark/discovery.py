"""nsqd TCP addresses from nsqlookupd: those that have a topic (to read) and all nodes (to publish).

`all_nodes` is a small adapter over the client's HTTP helpers, which cover `/lookup` but not `/nodes`.
"""

from __future__ import annotations

import logging

from ..client.errors import HTTPError
from ..client.http import endpoint, get_json, lookup_peers, lookup_producers
from ..go.gocompat import join_host_port

log = logging.getLogger(__name__)


def topic_producers(lookupds: tuple[str, ...], topic: str) -> set[str]:
    """Every nsqd that any reachable lookupd lists for ``topic`` (empty while no nsqd has it yet)."""
    found: set[str] = set()
    for lookupd in lookupds:
        try:
            found.update(lookup_producers(lookupd, topic))
        except HTTPError as err:
            log.warning("lookupd %s: %s", lookupd, err)
    return found


def all_nodes(lookupds: tuple[str, ...]) -> set[str]:
    """Every nsqd registered with any reachable lookupd (a new topic can be published on any of them)."""
    found: set[str] = set()
    for lookupd in lookupds:
        try:
            producers = get_json(endpoint(lookupd, "/nodes")).get("producers") or []
        except HTTPError as err:
            log.warning("lookupd %s: %s", lookupd, err)
            continue
        for peer in producers:
            host, port = peer["broadcast_address"], peer["tcp_port"]
            found.add(join_host_port(host, port))
    return found


def topic_nodes(lookupds: tuple[str, ...], topic: str) -> set[tuple[str, str]]:
    """(TCP address, HTTP address) of every nsqd that any reachable lookupd lists for ``topic``."""
    found: set[tuple[str, str]] = set()
    for lookupd in lookupds:
        try:
            peers = lookup_peers(lookupd, topic)
        except HTTPError as err:
            log.warning("lookupd %s: %s", lookupd, err)
            continue
        found.update((join_host_port(p["broadcast_address"], p["tcp_port"]),
                      join_host_port(p["broadcast_address"], p["http_port"])) for p in peers)
    return found
