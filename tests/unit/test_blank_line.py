"""The HTTP server finds the blank line that ends a request head with bytes.find (wsgi_server._blank_line); it
must find what the regex `\\r?\\n\\r?\\n` finds, wherever the search starts."""

from __future__ import annotations

import random
import re

import pytest

from nsqd_py.http_server.server import _blank_line

_BLANK = re.compile(rb"\r?\n\r?\n")


def _expected(buf: bytearray, head_start: int, search_from: int) -> tuple[int, int]:
    match = _BLANK.search(buf, search_from)
    if match is None:
        return 0, 0
    start = match.start()
    if start == search_from and start > head_start and buf[start - 1] == 13 and buf[start] == 10:
        start -= 1  # a CR just before where the search began belongs to the blank line too
    return start, match.end()


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"GET / HTTP/1.1\nHost: x\n\n", b"a\n\r\nb",
                                  b"a\r\n\nb", b"no end\r\n", b"\n\n", b"\r\n\r\n", b"a\r\r\n\r\n"])
def test_known_heads(data: bytes) -> None:
    buf = bytearray(data)
    assert _blank_line(buf, 0, 0) == _expected(buf, 0, 0)


def test_random_bytes_from_every_start() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        buf = bytearray(rng.choice(b"\r\nab") for _ in range(rng.randrange(12)))
        head_start = rng.randrange(len(buf) + 1)
        search_from = rng.randrange(head_start, len(buf) + 1)
        assert _blank_line(buf, head_start, search_from) == _expected(buf, head_start, search_from), buf
