"""Replay over HTTP (beyond nsqd): `POST /channel/create?...&start=POINT` and `POST /channel/reset?...&to=POINT`.

A point is `earliest`, an RFC 3339 time (`2026-12-01T10:00:00Z`, fractions to the nanosecond, any offset), Unix
milliseconds, or (reset only) `latest`. Both answer JSON: the point as asked, the oldest retained message's time,
whether the point was before it (the replay then begins there) and how many messages the replay covers; a reset
also says how many queued messages it dropped. Errors are nsqd's shape: 400 `INVALID_START` / `INVALID_TO` for a
point that is not one, 400 `NO_RETENTION` for a reset on a topic without retention, 400 `CHANNEL_EXISTS` for a create
with a start of a channel that exists (a reset moves it), 404 `CHANNEL_NOT_FOUND` for a reset of a missing channel.
On a topic without retention `/channel/create` answers as nsqd does: `start` is not one of its parameters.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from ..core.channel import Channel
from ..core.disk.retained_log import RetainedLog
from ..core.errors import DrainingError
from ..core.nsqd import NSQD
from ..core.replay import EARLIEST, LATEST, Start, resolve
from ..core.topic import Topic
from ..web.responses import APIError
from .params import DRAINING

_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)")
#: the latest point in Unix ms: the end of year 9999 (a point is checked whole before anything is created)
_LAST_MS = 253_402_300_799_999


def parse_point(text: str, param: str, latest: bool) -> str | int:
    """EARLIEST, LATEST (when ``latest``) or a time in Unix ns; 400 INVALID_<PARAM> otherwise."""
    if text == EARLIEST or (latest and text == LATEST):
        return text
    if text.isascii() and text.isdigit() and int(text) <= _LAST_MS:
        return int(text) * 1_000_000
    found = _RFC3339.fullmatch(text) if text.isascii() else None
    if found is not None:
        day, clock, fraction, zone = found.groups()
        try:
            offset = timedelta(0) if zone in "Zz" else (1 if zone[0] == "+" else -1) * timedelta(
                hours=int(zone[1:3]), minutes=int(zone[4:6]))
            at = datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=timezone(offset))
            seconds: int | None = int(at.timestamp())
        except (ValueError, OverflowError, OSError):  # no such day, an offset out of range, past what Python keeps
            seconds = None
        if seconds is not None and seconds * 1000 <= _LAST_MS:  # after its offset, still a year Python can write
            return seconds * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))
    points = "earliest, latest, " if latest else "earliest, "
    raise APIError(400, f"INVALID_{param.upper()} - {param} must be {points}an RFC 3339 time or Unix milliseconds")


def _rfc3339(ns: int | None) -> str | None:
    if ns is None:
        return None
    stamp = datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ns % 1_000_000_000:09d}Z"


def _retention(topic: Topic) -> RetainedLog:
    """The topic's retained log; 400 NO_RETENTION when retention is off."""
    log = topic.retained
    if log is None or not log.on:
        raise APIError(400, f"NO_RETENTION - topic {topic.name} keeps no messages to replay (set topic_retention "
                            "or topic_retention_bytes)")
    return log


def _answer(param: str, point: str | int, start: Start) -> dict[str, Any]:
    return {param: point if isinstance(point, str) else _rfc3339(point), "oldest_retained": _rfc3339(start.oldest),
            "before_retained": start.before_retained, "messages": start.messages}


def create_at(nsqd: NSQD, topic: Topic, name: str, text: str) -> dict[str, Any]:
    """A new channel whose backlog is the retained log from ``text`` on."""
    point = parse_point(text, "start", latest=False)
    log = _retention(topic)
    if topic.get_existing_channel(name) is not None:
        raise APIError(400, f"CHANNEL_EXISTS - {topic.name}:{name} exists: POST /channel/reset moves it")
    try:
        channel = topic.get_channel(name)
    except DrainingError:
        raise APIError(503, DRAINING) from None
    start = resolve(log, point, topic.depth())  # once the channel takes live messages: nothing falls between
    nsqd.replays.start(topic, channel, start)
    return _answer("start", point, start)


def reset(nsqd: NSQD, channel: Channel, text: str) -> dict[str, Any]:
    """Move ``channel`` to ``text``: its queued messages are dropped and the log from there replaces them; those in
    flight or deferred stay, and may come again from the log."""
    topic = channel.topic
    point = parse_point(text, "to", latest=True)
    log = _retention(topic)  # refused before anything is dropped
    nsqd.replays.stop(topic.name, channel.name, forget=True)
    dropped = channel.drop_queued()
    start = resolve(log, point, topic.depth())  # after the drop: what was published meanwhile comes again, not never
    nsqd.replays.start(topic, channel, start)
    return {**_answer("to", point, start), "dropped": dropped}
