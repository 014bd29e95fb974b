"""nsqd addresses from nsqlookupd: those that have a topic (to read) and all nodes (to publish), and running many HTTP
questions at once.

`all_nodes` is a small adapter over the client's HTTP helpers, which cover `/lookup` but not `/nodes`. The planner asks
its questions through `parallel`, so that one node that does not answer costs one timeout, not one per question.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

from ..client.errors import HTTPError
from ..client.http import endpoint, get_json, lookup_peers, lookup_producers
from ..go.gocompat import join_host_port

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
#: threads for one round of questions: enough for every nsqd of a large cluster at once
_MAX_THREADS = 32


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


def parallel(calls: dict[K, Callable[[], V]], deadline: float) -> tuple[dict[K, V], dict[K, BaseException]]:
    """Run every call on a thread of its own and wait until ``deadline`` (time.monotonic()) at most: the answers, and
    the errors (TimeoutError for a call still running then; its thread ends with its own request timeout)."""
    if not calls:
        return {}, {}
    pool = ThreadPoolExecutor(max_workers=min(_MAX_THREADS, len(calls)), thread_name_prefix="nsq-survey")
    futures = {key: pool.submit(call) for key, call in calls.items()}
    wait(futures.values(), timeout=max(0.0, deadline - time.monotonic()))
    pool.shutdown(wait=False, cancel_futures=True)
    answers: dict[K, V] = {}
    errors: dict[K, BaseException] = {}
    for key, future in futures.items():
        if not future.done() or future.cancelled():
            errors[key] = TimeoutError("no answer within the survey's timeout")
        elif future.exception() is not None:
            errors[key] = future.exception()  # type: ignore[assignment]
        else:
            answers[key] = future.result()
    return answers, errors


def lookup_nodes(lookupds: tuple[str, ...], topics: tuple[str, ...], pattern: re.Pattern[str] | None,
                 deadline: float, timeout: tuple[float, float],
                 ) -> tuple[dict[tuple[str, str], set[str]], dict[str, BaseException]]:
    """(TCP, HTTP) address of every nsqd that a lookupd lists for ``topics`` (or for the topics matching
    ``pattern`` that a lookupd knows), with the topics to read there; and the lookupds that did not answer."""
    unreachable: dict[str, BaseException] = {}
    if pattern is not None:
        known, failed = parallel({lookupd: _topics_of(lookupd, timeout) for lookupd in lookupds}, deadline)
        unreachable.update(failed)
        topics = tuple(sorted({t for found in known.values() for t in found if pattern.fullmatch(t)}))
    questions = {(lookupd, topic): _peers_of(lookupd, topic, timeout) for lookupd in lookupds for topic in topics}
    peers, errors = parallel(questions, deadline)
    unreachable.update((lookupd, err) for (lookupd, _), err in errors.items())
    nodes: dict[tuple[str, str], set[str]] = {}
    for (_, topic), found in peers.items():
        for tcp, http in found:
            nodes.setdefault((tcp, http), set()).add(topic)
    return nodes, unreachable


def _topics_of(lookupd: str, timeout: tuple[float, float]) -> Callable[[], list[str]]:
    return lambda: list(get_json(endpoint(lookupd, "/topics"), None, timeout).get("topics") or [])


def _peers_of(lookupd: str, topic: str, timeout: tuple[float, float]) -> Callable[[], list[tuple[str, str]]]:
    def ask() -> list[tuple[str, str]]:
        return [(join_host_port(p["broadcast_address"], p["tcp_port"]),
                 join_host_port(p["broadcast_address"], p["http_port"])) for p in lookup_peers(lookupd, topic, timeout)]
    return ask
