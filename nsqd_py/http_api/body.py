"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Reading a request body through a cap of limit + 1 bytes, so "too big" is detected the same way whether the
size was announced (Content-Length), not announced, or chunked; nothing past the cap is read into memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..web.responses import APIError

if TYPE_CHECKING:
    import falcon

_READ_PIECE = 1 << 16


class BodyStream(Protocol):
    """A request body as WSGI hands it over (`wsgi.input`, Falcon's `req.stream`)."""

    def read(self, size: int = -1, /) -> bytes: ...


def read_body(stream: BodyStream, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of the body (the server's wsgi.input ends where the body ends)."""
    try:
        return stream.read(limit + 1)
    except (OSError, ValueError):  # the client hung up mid-body or sent broken chunking
        raise APIError(500, "INTERNAL_ERROR") from None


def read_body_until_broken(req: falcon.Request, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of the body, ending early where the body breaks off: nsqd parses a binary
    MPUB while reading it, so a body that breaks after its declared messages still publishes them."""
    parts: list[bytes] = []
    total = 0
    while total <= limit:
        try:
            piece = req.stream.read(min(_READ_PIECE, limit + 1 - total))
        except (OSError, ValueError) as exc:
            parts.append(getattr(exc, "partial", b""))  # our server says what arrived before the break
            break
        if not piece:
            break
        parts.append(piece)
        total += len(piece)
    return b"".join(parts)
