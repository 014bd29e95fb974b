"""A channel's next messages as the channel page and the message page show them: asked of each node with nsqd-py's
`GET /channel/peek` (beyond nsqd). A node that does not answer it (Go's nsqd: 404) is left out without a warning,
so against Go nodes the channel page is Go's."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from .clusterinfo import ClusterInfo
from .upstream import fan_out

#: the messages the channel page shows of each node
PAGE_MESSAGES = 20
#: what a message page looks through for the one it opens: nsqd's cap on a peek
OPEN_LIMIT = 1000
#: a body's first characters in the channel page's table
PREVIEW = 60


def peek_nodes(ci: ClusterInfo, nodes: Sequence[str], topic: str, channel: str,
               limit: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """(node, its next ``limit`` messages) for each node that answered a peek, in ``nodes``' order."""
    query = urlencode({"topic": topic, "channel": channel, "n": limit})

    def peek(node: str) -> Any:
        endpoint = f"http://{node}/channel/peek?{query}"
        ci.logger.info(f"CI: querying nsqd {endpoint}")
        return ci.client.get_json(endpoint)

    answers = fan_out(nodes, peek)
    return [(node, answer["messages"]) for node, answer in zip(nodes, answers, strict=True)
            if isinstance(answer, dict) and isinstance(answer.get("messages"), list)]


def body_text(message: dict[str, Any]) -> tuple[str, bool]:
    """The body as text when it is UTF-8 (a cut body may end inside a character: those bytes are dropped), else
    its base64; and whether it is text."""
    raw = base64.b64decode(message["body"])
    ends = range(len(raw), max(len(raw) - 3, 0) - 1, -1) if message["truncated"] else (len(raw),)
    for end in ends:
        try:
            return raw[:end].decode("utf-8"), True
        except UnicodeDecodeError:
            continue
    return message["body"], False


def shown(node: str, message: dict[str, Any]) -> dict[str, Any]:
    """A peeked message with what the pages add: its node, its body as text (or base64) and a preview of it."""
    text, is_text = body_text(message)
    preview = text if len(text) <= PREVIEW else text[:PREVIEW] + "…"
    return {**message, "node": node, "text": text, "is_text": is_text, "preview": preview}
