"""nsqd's response envelopes (internal/http_api `RespondV1`, `PlainText`) and its API error type.

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
from typing import Any

import falcon

from .. import jsonenc
from ..log import Logger

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


def respond_v1(resp: falcon.Response, data: Any) -> None:
    resp.status = status_line(200)
    resp.set_header(*NSQ_CONTENT_TYPE)
    if data is None:
        resp.data = b""
    elif isinstance(data, str | bytes):
        resp.data = data.encode() if isinstance(data, str) else data
        if resp.data:  # Go sniffs a type only from a non-empty body
            resp.content_type = TEXT_TYPE
    else:
        resp.content_type = JSON_TYPE
        resp.data = jsonenc.dumps(data)


def respond_v1_error(resp: falcon.Response, code: int, text: str) -> None:
    """`{"message":"TEXT"}`; like nsqd, the text goes in unescaped (all of nsqd's texts are plain words)."""
    resp.status = status_line(code)
    resp.set_header(*NSQ_CONTENT_TYPE)
    resp.content_type = JSON_TYPE
    resp.data = b'{"message":"' + text.encode() + b'"}'


def respond_plain(resp: falcon.Response, code: int, text: str) -> None:
    resp.status = status_line(code)
    resp.content_type = TEXT_TYPE
    resp.data = text.encode()


def v1(handler: Handler, logger: Logger) -> Responder:
    """nsqd's `http_api.V1` decorator."""

    @functools.wraps(handler)
    def responder(req: falcon.Request, resp: falcon.Response, **params: str) -> None:
        try:
            data = handler(req, resp, **params)
        except APIError as err:
            _log_api_error(logger, err)
            respond_v1_error(resp, err.code, err.text)
        except Exception as err:  # nsqd's PanicHandler: log it, answer 500, keep serving
            logger.error(f"panic in HTTP handler - {err!r}")
            respond_v1_error(resp, 500, "INTERNAL_ERROR")
        else:
            respond_v1(resp, data)

    return responder


def plain_text(handler: Handler, logger: Logger) -> Responder:
    """nsqd's `http_api.PlainText` decorator."""

    @functools.wraps(handler)
    def responder(req: falcon.Request, resp: falcon.Response, **params: str) -> None:
        try:
            text = handler(req, resp, **params)
        except APIError as err:
            _log_api_error(logger, err)
            respond_plain(resp, err.code, err.text)
        except Exception as err:  # as in v1
            logger.error(f"panic in HTTP handler - {err!r}")
            respond_plain(resp, 500, "INTERNAL_ERROR")
        else:
            respond_plain(resp, 200, text)

    return responder


def _log_api_error(logger: Logger, err: APIError) -> None:
    if err.log:
        logger.error(err.log)
