"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

POST /pub and POST /mpub, with nsqd's checks in nsqd's order (bodies read through body.py's cap).

`pub` is /pub's one implementation: the Falcon route and the shortcut (shortcuts.py) both call it. It imports
no Falcon, so the shortcut serves a process that is only published to without loading it.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ..core.errors import BackendError, DrainingError, ExitingError, QueueFullError
from ..core.nsqd import NSQD
from ..core.topic import Topic
from ..go.durations import MILLISECOND
from ..web.params import BOOL_PARAMS, Query, first, query_args, request_query
from ..web.responses import APIError
from ..wire.names import is_valid_name
from .body import BodyStream, read_body, read_body_until_broken
from .params import DRAINING, get_topic, topic_from_query

if TYPE_CHECKING:
    import falcon

_INT32 = struct.Struct(">i")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_TOPIC_PARAM = "topic="


def is_plain(query_string: str) -> bool:
    """The query is `topic=NAME` alone, as Go's url.ParseQuery reads it: NAME is the whole value, unescaped."""
    # any of these makes it more for Go's url.ParseQuery: another pair, an escape (four substring searches cost a
    # fifth of a set test per character)
    return query_string.startswith(_TOPIC_PARAM) and "&" not in query_string and ";" not in query_string \
        and "%" not in query_string and "+" not in query_string


def pub(nsqd: NSQD, content_length: int | None, stream: BodyStream, query_string: str) -> str:
    """nsqd's doPUB: the body, then the topic (created if new), then `defer`, then the publish."""
    body = read_message(nsqd, content_length, stream)
    if is_plain(query_string):  # what nearly every publisher sends: nothing to parse, nothing deferred
        name = query_string[len(_TOPIC_PARAM):]
        if not is_valid_name(name):
            raise APIError(400, "INVALID_TOPIC")
        publish(get_topic(nsqd, name), [body])
        return "OK"
    query = query_args(query_string)
    topic = topic_from_query(nsqd, query)
    defer = first(query, "defer")
    publish(topic, [body], _defer_seconds(nsqd, defer) if defer is not None else 0.0)
    return "OK"


def read_message(nsqd: NSQD, content_length: int | None, stream: BodyStream) -> bytes:
    """The body of a /pub: 413 MSG_TOO_BIG (announced or read), 400 MSG_EMPTY, 500 where it broke off."""
    max_size = nsqd.opts.max_msg_size
    if (content_length or 0) > max_size:
        raise APIError(413, "MSG_TOO_BIG")
    body = read_body(stream, max_size)
    if len(body) > max_size:
        raise APIError(413, "MSG_TOO_BIG")
    if not body:
        raise APIError(400, "MSG_EMPTY")
    return body


def publish(topic: Topic, bodies: list[bytes], deferred: float = 0.0) -> None:
    """An empty text /mpub publishes nothing (and answers OK, as nsqd does)."""
    try:
        if bodies:
            topic.publish(bodies, deferred)
        elif topic.exiting:
            raise ExitingError()
    except QueueFullError as err:  # beyond nsqd: a bounded channel refuses it
        raise APIError(503, f"CHANNEL_FULL - {err}") from None
    except DrainingError:  # beyond nsqd
        raise APIError(503, DRAINING) from None
    except (ExitingError, BackendError):
        raise APIError(503, "EXITING") from None


def _defer_seconds(nsqd: NSQD, text: str) -> float:
    """`defer` in ms: a Go int64 (`strconv.ParseInt`), multiplied into a Duration with int64 wrap-around,
    then 0 <= d <= --max-req-timeout."""
    digits = text[1:] if text[:1] in "+-" else text
    if not digits or not (digits.isascii() and digits.isdigit()):
        raise APIError(400, "INVALID_DEFER")
    ms = int(text)
    if not _INT64_MIN <= ms <= _INT64_MAX:
        raise APIError(400, "INVALID_DEFER")
    deferred = (ms * MILLISECOND - _INT64_MIN) % (1 << 64) + _INT64_MIN
    if deferred < 0 or deferred > nsqd.opts.max_req_timeout:
        raise APIError(400, "INVALID_DEFER")
    return deferred / 1e9


class Pub:
    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> str:
        return pub(self.nsqd, req.content_length, req.stream, req.query_string)


class MPub:
    """Newline-separated messages, or with `binary=true|1` (or any value but false/0) nsqd's binary MPUB body."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> str:
        opts = self.nsqd.opts
        if (req.content_length or 0) > opts.max_body_size:
            raise APIError(413, "BODY_TOO_BIG")
        query = request_query(req)
        topic = topic_from_query(self.nsqd, query)
        if self._binary(query):
            body = read_body_until_broken(req, opts.max_body_size)
            if len(body) > opts.max_body_size:
                raise APIError(413, "BODY_TOO_BIG")
            bodies = parse_binary_mpub(body, opts.max_msg_size, opts.max_body_size)
        else:
            body = read_body(req.stream, opts.max_body_size)
            bodies = split_text_mpub(body, opts.max_msg_size, opts.max_body_size)
        if bodies:
            publish(topic, bodies)
        return "OK"

    def _binary(self, query: Query) -> bool:
        value = first(query, "binary")
        if value is None:
            return False
        if value not in BOOL_PARAMS:
            self.nsqd.logger.warn(f"deprecated value '{value}' used for /mpub binary param")
            return True
        return BOOL_PARAMS[value]


def split_text_mpub(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    """nsqd's line loop over a body read through a (max_body_size + 1) cap: only the `\\n` is cut off, empty
    lines are skipped, and whichever of BODY_TOO_BIG (the cap was hit) or MSG_TOO_BIG comes first wins."""
    bodies = []
    total = 0
    read_max = max_body_size + 1
    start = 0
    while start < len(body):
        end = body.find(b"\n", start)
        end = len(body) if end < 0 else end + 1
        total += end - start
        if total == read_max:
            raise APIError(413, "BODY_TOO_BIG")
        line = body[start:end].removesuffix(b"\n")
        start = end
        if not line:
            continue
        if len(line) > max_msg_size:
            raise APIError(413, "MSG_TOO_BIG")
        bodies.append(line)
    return bodies


def parse_binary_mpub(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    """`[count int32]([size int32][bytes])*`; errors are nsqd's readMPUB codes without `E_` (always 413).
    Bytes after the last message are ignored, as nsqd never reads them."""
    view = memoryview(body)
    if len(view) < 4:
        raise APIError(413, "BAD_BODY")
    (count,) = _INT32.unpack_from(view)
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise APIError(413, "BAD_BODY")
    bodies = []
    pos = 4
    for _ in range(count):
        if pos + 4 > len(view):
            raise APIError(413, "BAD_MESSAGE")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size <= 0 or size > max_msg_size or pos + size > len(view):
            raise APIError(413, "BAD_MESSAGE")
        bodies.append(bytes(view[pos:pos + size]))
        pos += size
    return bodies
