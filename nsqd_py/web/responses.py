"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

nsqd's response envelopes (internal/http_api `RespondV1`, `PlainText`) and its API error type.

Handlers are Falcon responders that *return* their data and raise `APIError`, like nsqd's
`func(...) (interface{}, error)` handlers; `v1` and `plain_text` turn either outcome into the response:

* V1 (every route but /ping): a string answers as raw text (`text/plain; charset=utf-8`, what Go sniffs, and
  no Content-Type at all when it is empty, e.g. an unset string option), None as an empty 200 with
  `Content-Length: 0`, anything else as JSON; an error as its status with `{"message":"TEXT"}`. All of them
  carry `X-NSQ-Content-Type: nsq; version=1.0`.
* plain text (/ping): the text or the error text, no X-NSQ header.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from ..go import jsonenc
from ..runtime.log import Logger

if TYPE_CHECKING:
    import falcon

JSON_TYPE = "application/json; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
HTML_TYPE = "text/html; charset=utf-8"
NSQ_CONTENT_TYPE = ("X-NSQ-Content-Type", "nsq; version=1.0")

Handler = Callable[..., Any]
Responder = Callable[..., None]


class APIError(Exception):
    """An error answer: HTTP status and nsqd's text. ``log`` is an ERROR line nsqd writes for it."""

    def __init__(self, code: int, text: str, log: str = "") -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.log = log


@functools.cache
def status_line(code: int) -> str:
    """`413 Request Entity Too Large`: Go's reason phrases, which Python's HTTPStatus shares."""
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return str(code)


#: an answer as status line, headers and body: what a responder puts in Falcon's response, or a WSGI app
#: serving without Falcon (shortcuts.py) hands to the server
Answer = tuple[str, list[tuple[str, str]], bytes]


def v1_answer(data: Any) -> Answer:
    headers = [NSQ_CONTENT_TYPE]
    if data is None:
        return status_line(200), headers, b""
    if isinstance(data, str | bytes):
        body = data.encode() if isinstance(data, str) else data
        if body:  # Go sniffs a type only from a non-empty body
            headers.append(("Content-Type", TEXT_TYPE))
        return status_line(200), headers, body
    return status_line(200), [NSQ_CONTENT_TYPE, ("Content-Type", JSON_TYPE)], jsonenc.dumps(data)


def v1_error_answer(code: int, text: str) -> Answer:
    """`{"message":"TEXT"}`; like nsqd, the text goes in unescaped (all of nsqd's texts are plain words)."""
    return status_line(code), [NSQ_CONTENT_TYPE, ("Content-Type", JSON_TYPE)], b'{"message":"' + text.encode() + b'"}'


def plain_answer(code: int, text: str) -> Answer:
    return status_line(code), [("Content-Type", TEXT_TYPE)], text.encode()


def call_v1(logger: Logger, handler: Handler, *args: Any, **params: Any) -> Answer:
    """nsqd's `http_api.V1` decorator around one call of ``handler``."""
    return _call(logger, v1_answer, v1_error_answer, handler, *args, **params)


def call_plain_text(logger: Logger, handler: Handler, *args: Any, **params: Any) -> Answer:
    """nsqd's `http_api.PlainText` decorator around one call of ``handler``."""
    return _call(logger, _plain_ok, plain_answer, handler, *args, **params)


def _plain_ok(text: str) -> Answer:
    return plain_answer(200, text)


def _call(logger: Logger, on_data: Callable[[Any], Answer], on_error: Callable[[int, str], Answer],
          handler: Handler, *args: Any, **params: Any) -> Answer:
    """What both decorators do: an APIError answers its status and text, any other exception is logged and
    answers 500 (nsqd's PanicHandler), so the server keeps serving."""
    try:
        data = handler(*args, **params)
    except APIError as err:
        _log_api_error(logger, err)
        return on_error(err.code, err.text)
    except Exception as err:
        logger.error(f"panic in HTTP handler - {err!r}")
        return on_error(500, "INTERNAL_ERROR")
    return on_data(data)


def apply_answer(resp: falcon.Response, answer: Answer) -> None:
    status, headers, body = answer
    resp.status = status
    for name, value in headers:
        resp.set_header(name, value)
    resp.data = body


def v1(handler: Handler, logger: Logger) -> Responder:
    """nsqd's `http_api.V1` decorator as a Falcon responder."""

    @functools.wraps(handler)
    def responder(req: falcon.Request, resp: falcon.Response, **params: str) -> None:
        apply_answer(resp, call_v1(logger, handler, req, resp, **params))

    return responder


def plain_text(handler: Handler, logger: Logger) -> Responder:
    """nsqd's `http_api.PlainText` decorator as a Falcon responder."""

    @functools.wraps(handler)
    def responder(req: falcon.Request, resp: falcon.Response, **params: str) -> None:
        apply_answer(resp, call_plain_text(logger, handler, req, resp, **params))

    return responder


def _log_api_error(logger: Logger, err: APIError) -> None:
    if err.log:
        logger.error(err.log)
