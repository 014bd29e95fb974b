"""JSON bytes like Go's encoding/json: orjson's output with Go's HTML-safe escapes.

Go escapes `<`, `>`, `&`, U+2028 and U+2029 inside strings; those characters can only occur
inside JSON strings, so replacing them in the encoded bytes is exact.
"""

from __future__ import annotations

from typing import Any

import orjson

_GO_ESCAPES = ((b"&", b"\\u0026"), (b"<", b"\\u003c"), (b">", b"\\u003e"),
               ("\u2028".encode(), b"\\u2028"), ("\u2029".encode(), b"\\u2029"))


def dumps(value: Any) -> bytes:
    data = orjson.dumps(value)
    for raw, escaped in _GO_ESCAPES:
        if raw in data:
            data = data.replace(raw, escaped)
    return data
