"""Decoding a flat JSON object into a Go struct the way Go's encoding/json does, for bodies hostile clients send.

Where Python's parsers and Go's differ, clients can tell (a body one accepts and the other refuses):
invalid UTF-8 and lone surrogate escapes become U+FFFD instead of failing; nesting is allowed up to Go's
10,000 levels (iteratively: no recursion limit); a value under a key the struct does not have is only
validated, so `1e400` or a deep array there is fine; keys match the field names exactly or, failing that,
case-insensitively with Unicode folding (`"\\u017fnappy"` is `snappy`); a wrongly typed value for a known
field is an error; `null` leaves a field alone; the last of repeated keys wins.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Mapping
from typing import Any

#: Go's maxNestingDepth
MAX_DEPTH = 10_000

_WS = re.compile(rb"[ \t\n\r]*")
_STRING = re.compile(rb'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9A-Fa-f]{4}))*"')
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]*)\Z")
_LITERALS = (b"true", b"false", b"null")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_one_byte(err: UnicodeError) -> tuple[str, int]:
    """Go's decoder replaces each invalid byte with U+FFFD (Python's 'replace' may take several at once)."""
    assert isinstance(err, UnicodeDecodeError)
    return "\ufffd", err.start + 1


codecs.register_error("nsqd-go-fffd", _replace_one_byte)


class GoJSONError(ValueError):
    """The body is not JSON Go would decode into the struct."""


def _string(raw: bytes) -> str:
    """A JSON string literal (quotes included) as Go decodes it."""
    text = raw.decode("utf-8", "nsqd-go-fffd")
    value = json.loads(text) if "\\" in text else text[1:-1]
    return _SURROGATE.sub("\ufffd", value)  # a lone surrogate escape; a valid pair is one char already


class _Scanner:
    """Walks the bytes once; values of unknown keys are checked and skipped without building them."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def skip_ws(self) -> None:
        self.pos = _WS.match(self.data, self.pos).end()  # type: ignore[union-attr]

    def token(self, pattern: re.Pattern[bytes]) -> bytes:
        match = pattern.match(self.data, self.pos)
        if match is None:
            raise GoJSONError(f"invalid character at offset {self.pos}")
        self.pos = match.end()
        return match.group()

    def expect(self, char: bytes) -> None:
        self.skip_ws()
        if self.data[self.pos : self.pos + 1] != char:
            raise GoJSONError(f"expected {char.decode()} at offset {self.pos}")
        self.pos += 1

    def scalar_or_open(self) -> bytes:
        """The next value's text if it is a scalar, or the single byte `[` / `{` that opens a container."""
        self.skip_ws()
        head = self.data[self.pos : self.pos + 1]
        if head in (b"[", b"{"):
            self.pos += 1
            return head
        if head == b'"':
            return self.token(_STRING)
        for literal in _LITERALS:
            if self.data.startswith(literal, self.pos):
                self.pos += len(literal)
                return literal
        return self.token(_NUMBER)

    def skip_container(self, opener: bytes, depth: int) -> None:
        """Validate and skip the rest of a container whose opener was just read; ``depth`` is its nesting
        level (the top-level value is 1). Iterative, so Go's 10,000 levels need no recursion."""
        if depth > MAX_DEPTH:
            raise GoJSONError("exceeded max depth")
        stack = [opener]
        just_opened = True
        while stack:
            self.skip_ws()
            closer = b"]" if stack[-1] == b"[" else b"}"
            char = self.data[self.pos : self.pos + 1]
            if char == closer:
                self.pos += 1
                stack.pop()
                just_opened = False
                continue
            if not just_opened:
                if char != b",":
                    raise GoJSONError(f"invalid character at offset {self.pos}")
                self.pos += 1
            if stack[-1] == b"{":
                self.skip_ws()
                self.token(_STRING)
                self.expect(b":")
            value = self.scalar_or_open()
            just_opened = value in (b"[", b"{")
            if just_opened:
                if depth + len(stack) > MAX_DEPTH:
                    raise GoJSONError("exceeded max depth")
                stack.append(value)

    def end(self) -> None:
        self.skip_ws()
        if self.pos != len(self.data):
            raise GoJSONError("invalid character after top-level value")


def _convert(raw: bytes, kind: type, name: str, int_bits: int) -> Any:
    """A scalar's text into the field's Go type, or GoJSONError (Go's UnmarshalTypeError)."""
    if kind is bool:
        if raw in (b"true", b"false"):
            return raw == b"true"
    elif kind is int:
        if _INTEGER.match(raw):
            value = int(raw)
            if -(1 << (int_bits - 1)) <= value < (1 << (int_bits - 1)):
                return value
    elif kind is str and raw[:1] == b'"':
        return _string(raw)
    raise GoJSONError(f"json: cannot unmarshal {raw[:20]!r} into Go struct field {name}")


def decode_struct(data: bytes, fields: Mapping[str, tuple[type, int]]) -> dict[str, Any]:
    """Decode ``data`` into the fields of a Go struct: {json name: (bool|int|str, int bits)}.

    Returns the values set (absent and null keys are left out); raises GoJSONError when Go's
    json.Unmarshal would return an error."""
    folded = {name.casefold(): name for name in fields}
    scanner = _Scanner(data)
    first = scanner.scalar_or_open()
    if first != b"{":
        if first == b"[":
            scanner.skip_container(first, 1)
        scanner.end()
        if first == b"null":
            return {}
        raise GoJSONError("json: cannot unmarshal non-object into Go struct")
    out: dict[str, Any] = {}
    type_error: GoJSONError | None = None
    scanner.skip_ws()
    if data[scanner.pos : scanner.pos + 1] == b"}":
        scanner.pos += 1
    else:
        while True:
            scanner.skip_ws()
            key = _string(scanner.token(_STRING))
            scanner.expect(b":")
            value = scanner.scalar_or_open()
            name = key if key in fields else folded.get(key.casefold())
            if value in (b"[", b"{"):
                scanner.skip_container(value, 2)
                if name is not None and type_error is None:
                    type_error = GoJSONError(f"json: cannot unmarshal container into Go struct field {name}")
            elif name is not None and value != b"null":
                kind, bits = fields[name]
                try:
                    out[name] = _convert(value, kind, name, bits)
                except GoJSONError as err:
                    type_error = type_error or err  # Go finishes decoding, then reports the first type error
            scanner.skip_ws()
            char = data[scanner.pos : scanner.pos + 1]
            scanner.pos += 1
            if char == b"}":
                break
            if char != b",":
                raise GoJSONError(f"invalid character at offset {scanner.pos - 1}")
    scanner.end()
    if type_error is not None:
        raise type_error
    return out
