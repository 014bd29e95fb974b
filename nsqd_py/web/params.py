"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Query strings read the way nsqd and nsqlookupd read them (Go's `url.ParseQuery`), nsqd's boolean parameters and
the topic/channel arguments (Go's `internal/http_api` req_params, which both daemons share)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import unquote_to_bytes

from ..wire.names import is_valid_name
from .responses import APIError

if TYPE_CHECKING:
    import falcon

#: nsqd's `boolParams`; anything else (or nothing) means the parameter's default.
BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")

Query = dict[str, list[str]]


def parse_query(raw: str) -> Query:
    """Go's `url.ParseQuery`: `&`-separated pairs, `+` is a space, `%XX` escapes; ValueError where Go errs
    (a `;` in a pair, a malformed `%`). WSGI hands the wire bytes over as latin-1 text; decoded values are
    UTF-8 with invalid bytes kept as surrogates, so they never pass a name check (as in nsqd)."""
    values: Query = {}
    for pair in raw.split("&"):
        if ";" in pair:
            raise ValueError("invalid semicolon separator in query")
        if not pair:
            continue
        key, _, value = pair.partition("=")
        values.setdefault(_unescape(key), []).append(_unescape(value))
    return values


def _unescape(text: str) -> str:
    if text.isascii() and "%" not in text and "+" not in text:
        return text  # nothing to decode (the usual `topic=name`)
    bad = _BAD_ESCAPE.search(text)
    if bad:
        escape = text[bad.start():bad.start() + 3].replace("\\", "\\\\").replace('"', '\\"')
        raise ValueError(f'invalid URL escape "{escape}"')
    raw = unquote_to_bytes(text.replace("+", " ").encode("latin-1"))
    return raw.decode("utf-8", "surrogateescape")


def request_query(req: falcon.Request) -> Query:
    """The request's query (see `query_args`)."""
    return query_args(req.query_string)


def query_args(query_string: str) -> Query:
    """A request's query, or 400 INVALID_REQUEST (logged like nsqd) when Go could not parse it."""
    try:
        return parse_query(query_string)
    except ValueError as err:
        raise APIError(400, "INVALID_REQUEST", log=f"failed to parse request params - {err}") from None


def first(query: Query, key: str) -> str | None:
    """The first value of ``key`` (nsqd's `reqParams.Get`), None when the key is absent."""
    found = query.get(key)
    return found[0] if found else None


def bool_param(query: Query, key: str) -> bool:
    """true/1 or false/0; anything else, or nothing, is true (nsqd's /stats `include_*` parameters)."""
    return BOOL_PARAMS.get(first(query, key) or "", True)


def required_arg(req: falcon.Request | Query, key: str, invalid: str | None = None) -> str:
    """`key=` of the query: 400 `MISSING_ARG_<KEY>` when absent; with ``invalid``, 400 ``invalid`` when it is not
    a valid topic/channel name."""
    value = first(req if isinstance(req, dict) else request_query(req), key)
    if value is None:
        raise APIError(400, f"MISSING_ARG_{key.upper()}")
    if invalid is not None and not is_valid_name(value):
        raise APIError(400, invalid)
    return value


def topic_channel_args(req: falcon.Request) -> tuple[str, str]:
    """NSQ's `http_api.GetTopicChannelArgs` (nsqd's and nsqlookupd's channel routes): both names
    present and valid, else 400 with nsqd's `MISSING_ARG_*` / `INVALID_ARG_*`."""
    query = request_query(req)
    return required_arg(query, "topic", "INVALID_ARG_TOPIC"), required_arg(query, "channel", "INVALID_ARG_CHANNEL")
