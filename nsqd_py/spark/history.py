"""Reading history: the first start of a query on a retained topic replays it, as Kafka's source starts at its
earliest offsets or at a time.

nsqd-py keeps a topic's messages with retention on (`--topic-retention`, `--topic-retention-bytes`, or per topic
`POST /topic/settings`), and `POST /channel/create?...&start=earliest|<time>` makes a channel whose backlog is that
history from the point on (docs/operations.md, "Retention and replay"). At the query's first start (starts.py), for
each subscribed topic on each nsqd whose channel does not exist yet:

* the topic has retention: the channel is created with `start=` (`earliest`, or startingTimestamp /
  startingOffsetsByTimestamp as an RFC 3339 time to the nanosecond). The replay runs inside nsqd: the executors read
  the channel as any other, so batches are planned, written ahead and replayed exactly as before.
* it has none: `earliest` keeps its old meaning (the channel as it is: what waits in the topic's queue); a start time
  fails the query, naming the topics without retention: it would read nothing of what it asked for.

A channel that exists already is read as it is (a start time is then not applied, with a warning). A start time
before the oldest retained message begins at that message: nsqd says `before_retained`, which failOnDataLoss turns
into a failure (the channels just made are deleted again, so a restart fails the same way) or, when false, a warning.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..client.errors import HTTPError
from . import nsqd_http
from .connect import ConnectionConfigError
from .options import OptionError, ReadOptions
from .planner import _Node, ask_every_nsqd
from .slices import DataLossError

log = logging.getLogger(__name__)

#: the topic settings that turn retention on (a topic's /stats row shows those in force under "settings")
RETENTION_SETTINGS = ("topic_retention", "topic_retention_bytes")


class NoRetentionError(OptionError):
    """A start time on a topic that keeps no history: nothing it asks for could be read."""


@dataclass(frozen=True)
class _Channel:
    """One subscribed topic on one nsqd, before its first start."""

    topic: str
    node: _Node
    retained: bool
    exists: bool

    @property
    def where(self) -> str:
        return f"topic {self.topic} on nsqd {self.node.tcp}"


def start_replays(opts: ReadOptions) -> dict[str, dict[str, Any]]:
    """Create the query's missing channels of retained topics at their start (see the module's doc); the answers of
    those created, by `topic@nsqd`. Unreachable nsqd fail a start time (it can be applied once only) and are skipped
    otherwise, per failOnUnreachable: their channels are then made as they always were, without history."""
    strict = opts.starts_at_time or opts.fail_on_unreachable
    channels = _channels(opts, strict)
    points = {c: _point(opts, c.topic) for c in channels}
    _refuse_without_retention(opts, [c for c in channels if isinstance(points[c], int) and not c.retained
                                      and not c.exists])
    for c in channels:
        if c.exists and isinstance(points[c], int):
            log.warning("channel %s of %s exists already: %s is not applied, the query reads the channel as it is "
                        "(POST /channel/reset?topic=%s&channel=%s&to=... moves it)", opts.channel, c.where,
                        opts.describe_start(), c.topic, opts.channel)
    timeout = (min(2.0, opts.connect.connect_timeout), opts.connect.connect_timeout)
    created: dict[_Channel, dict[str, Any]] = {}
    for c in channels:
        if c.retained and not c.exists:
            answer = _create_at(opts, c, points[c], timeout)
            if answer is not None:
                created[c] = answer
    trimmed = [c for c, answer in created.items() if answer.get("before_retained")]
    if trimmed:
        _trimmed(opts, trimmed, created, timeout)
    for c, answer in created.items():
        log.info("channel %s of %s replays %s retained messages from %s (oldest retained: %s)", opts.channel, c.where,
                 answer.get("messages"), answer.get("start"), answer.get("oldest_retained"))
    return {f"{c.topic}@{c.node.tcp}": answer for c, answer in created.items()}


def _point(opts: ReadOptions, topic: str) -> str | int:
    point = opts.start_of(topic)
    if point is None:
        raise OptionError(f"option 'startingOffsetsByTimestamp' gives no time for topic {topic}, which "
                          f"'subscribePattern' found: give one for every topic the query reads")
    return point


def _refuse_without_retention(opts: ReadOptions, unretained: list[_Channel]) -> None:
    if not unretained:
        return
    topics = sorted({c.topic for c in unretained})
    raise NoRetentionError(
        f"{opts.describe_start()} needs the topic's history, but {', '.join(c.where for c in unretained)} keeps "
        f"none (retention is off): turn it on before the messages to read are published (nsqd-py's "
        f"--topic-retention / --topic-retention-bytes, or POST /topic/settings?topic={topics[0]}&topic_retention=24h), "
        f"or start with startingOffsets=earliest, which reads the channel as it is")


def _trimmed(opts: ReadOptions, trimmed: list[_Channel], created: dict[_Channel, dict[str, Any]],
             timeout: tuple[float, float]) -> None:
    """Starts older than what is retained: failOnDataLoss fails the query, after deleting the channels just made
    (a restart then fails the same way instead of reading on), or warns."""
    what = "; ".join(f"{c.where}: {created[c].get('start')} is before the oldest retained message "
                     f"({created[c].get('oldest_retained')})" for c in trimmed)
    if not opts.fail_on_data_loss:
        log.warning("%s: messages from before it were trimmed by retention and are not read; reading from the oldest "
                    "retained message on (failOnDataLoss=false)", what)
        return
    for c in created:
        try:
            nsqd_http.post(c.node.http, "/channel/delete", {"topic": c.topic, "channel": opts.channel}, opts.connect,
                           timeout)
        except (HTTPError, OptionError, ConnectionConfigError) as err:
            log.warning("could not delete channel %s of %s again: %s", opts.channel, c.where, err)
    raise DataLossError(f"{what}: the messages from the start asked for until then were trimmed by retention. Start "
                        f"later (or at earliest), or set failOnDataLoss=false to read from the oldest retained message")


def _create_at(opts: ReadOptions, c: _Channel, point: str | int, timeout: tuple[float, float],
               ) -> dict[str, Any] | None:
    """POST /channel/create with start: nsqd's answer, or None when the channel appeared meanwhile (read as it is)
    or retention was switched off meanwhile (then as without retention)."""
    params = {"topic": c.topic, "channel": opts.channel, "start": point if isinstance(point, str) else _rfc3339(point)}
    resp = nsqd_http.request("POST", c.node.http, "/channel/create", params, opts.connect, timeout)
    text = resp.data.decode("utf-8", "replace").strip()
    if resp.status == 400 and "CHANNEL_EXISTS" in text:
        log.info("channel %s of %s appeared before its start was applied: reading it as it is", opts.channel, c.where)
        return None
    if (resp.status == 200 and not text) or (resp.status == 400 and "NO_RETENTION" in text):
        # nsqd made a plain channel (or an older one refused): the topic's retention was switched off meanwhile
        if isinstance(point, int):
            _refuse_without_retention(opts, [c])
        return None
    if resp.status != 200:
        raise HTTPError(f"POST /channel/create of {c.where} with start={params['start']} got status {resp.status}: "
                        f"{text}", resp.status)
    try:
        answer = json.loads(resp.data)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "start" not in answer:
        raise HTTPError(f"POST /channel/create of {c.where} with start={params['start']} did not answer a replay "
                        f"({text[:200]!r}): is it nsqd-py?")
    return answer


def _rfc3339(ns: int) -> str:
    stamp = datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ns % 1_000_000_000:09d}Z"


def _channels(opts: ReadOptions, strict: bool) -> list[_Channel]:
    """Every subscribed topic on every nsqd, with whether it retains and whether the channel exists (a missing
    topic is created, as the survey would: it may retain by nsqd's default)."""
    found, _ = ask_every_nsqd(opts, strict, _node_call)
    return sorted(found, key=lambda c: (c.topic, c.node.tcp))


def _node_call(node: _Node, topics: set[str] | None, pattern: re.Pattern[str] | None, opts: ReadOptions,
               timeout: tuple[float, float]) -> Callable[[], list[_Channel]]:
    def ask() -> list[_Channel]:
        found = _topic_rows(node, next(iter(topics)) if topics is not None and len(topics) == 1 else None, opts,
                            timeout)
        wanted = topics if topics is not None else {t for t in found if pattern is not None and pattern.fullmatch(t)}
        rows = []
        for topic in sorted(wanted):
            row = found.get(topic)
            if row is None:
                nsqd_http.post(node.http, "/topic/create", {"topic": topic}, opts.connect, timeout)
                row = _topic_rows(node, topic, opts, timeout).get(topic, {})
            settings = row.get("settings") or {}
            rows.append(_Channel(topic, node, any(_on(settings.get(key)) for key in RETENTION_SETTINGS),
                                 any(ch.get("channel_name") == opts.channel for ch in row.get("channels") or [])))
        return rows
    return ask


def _on(value: object) -> bool:
    """A retention setting as /stats shows it (`"1h0m0s"`, bytes) is on: not absent, not 0 (an override to off)."""
    return value not in (None, 0, "", "0", "0s")


def _topic_rows(node: _Node, topic: str | None, opts: ReadOptions, timeout: tuple[float, float],
                ) -> dict[str, dict[str, Any]]:
    params = {"format": "json", "include_clients": "false", **({"topic": topic} if topic else {})}
    stats = nsqd_http.get_json(node.http, "/stats", params, opts.connect, timeout)
    return {t["topic_name"]: t for t in stats.get("topics") or []}
