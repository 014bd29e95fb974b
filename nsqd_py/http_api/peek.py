"""GET /channel/peek and GET /topic/peek (beyond nsqd): the next messages of a channel or of a topic's own backlog, as
JSON, looked at without being consumed (RabbitMQ's "get messages" with requeue, JetStream's `msg get`).

`/channel/peek?topic=T&channel=C&n=N&state=queued|in_flight|deferred` lists the queued messages in the order the
channel hands them out, then those in flight by deadline, then the deferred by due time (`state` keeps one kind);
`/topic/peek?topic=T&n=N` the topic's own queue (while it has no channel, or is paused). Nothing changes: no
attempt, no order, no deadline, nothing read off a disk queue (core/disk/reader.py's `peek` preads past the read
cursor). `n` is 1 to PEEK_MAX (default 1); a body is cut at BODY_CAP bytes, with its full size given.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import falcon

from ..core.message import Message
from ..core.nsqd import NSQD
from ..tcp.client_state import ClientState
from ..web.params import Query, first, request_query, required_arg, topic_channel_args
from ..web.responses import APIError
from .topics import existing_topic

#: the most messages one peek answers
PEEK_MAX = 1000
#: the most bytes of a body a peek gives (base64 before encoding); `truncated` says when it cut one
BODY_CAP = 4096
STATES = ("queued", "in_flight", "deferred")

_INTEGER = re.compile(r"[+-]?[0-9]+")


def peek_count(query: Query) -> int:
    """`n=`, 1 by default; 400 INVALID_N unless it is an integer from 1 to PEEK_MAX."""
    raw = first(query, "n")
    if raw is None:
        return 1
    if not _INTEGER.fullmatch(raw) or not 1 <= int(raw) <= PEEK_MAX:
        raise APIError(400, f"INVALID_N - n takes an integer from 1 to {PEEK_MAX}")
    return int(raw)


def peek_state(query: Query) -> str:
    """`state=`, "" (every state) when absent or empty; 400 INVALID_STATE for another word."""
    state = first(query, "state") or ""
    if state and state not in STATES:
        raise APIError(400, f"INVALID_STATE - state takes {', '.join(STATES)}")
    return state


def describe(msg: Message, state: str, at_ms: int = 0) -> dict[str, Any]:
    """One message as a peek answers it; ``at_ms`` is its due time (deferred) or deadline (in flight), Unix ms."""
    body = msg.body
    row: dict[str, Any] = {
        "id": msg.id.decode("latin-1"),
        "state": state,
        "timestamp": msg.timestamp,
        "attempts": msg.attempts,
        "body_size": len(body),
        "truncated": len(body) > BODY_CAP,
        "body": base64.b64encode(body[:BODY_CAP]).decode(),
    }
    if state == "deferred":
        row["deliver_at"] = at_ms
    elif state == "in_flight":
        row["deadline"] = at_ms
        client = msg.client
        if isinstance(client, ClientState):
            row["client"] = {"client_id": client.client_id, "hostname": client.hostname,
                             "remote_address": client.remote_address}
    return row


class ChannelPeek:
    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        topic_name, channel_name = topic_channel_args(req)
        channel = existing_topic(self.nsqd, topic_name).get_existing_channel(channel_name)
        if channel is None:
            raise APIError(404, "CHANNEL_NOT_FOUND")
        query = request_query(req)
        limit, state = peek_count(query), peek_state(query)
        return {"topic": topic_name, "channel": channel_name,
                "messages": [describe(msg, kind, at) for kind, msg, at in channel.peek(limit, state)]}


class TopicPeek:
    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        query = request_query(req)
        topic = existing_topic(self.nsqd, required_arg(query, "topic", "INVALID_TOPIC"))
        limit = peek_count(query)
        return {"topic": topic.name, "messages": [describe(msg, "queued") for msg in topic.peek(limit)]}
