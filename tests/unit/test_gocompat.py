"""The Go-compatibility helpers every layer shares (nsqd_py/go/gocompat.py)."""

from __future__ import annotations

from nsqd_py.go.gocompat import go_quote, join_host_port


def test_go_quote() -> None:
    assert go_quote('a "b"\\') == '"a \\"b\\"\\\\"'
    assert go_quote("tab\there\n") == '"tab\\there\\n"'
    assert go_quote("caf\u00e9\x01") == '"caf\u00e9\\x01"'


def test_go_quote_bytes_keeps_invalid_utf8_as_hex() -> None:
    assert go_quote(b"caf\xc3\xa9 \xff\x7f\x00") == '"caf\u00e9 \\xff\\x7f\\x00"'
    assert go_quote(b"\xe2\x80\x8b\xf0\x9f\x98\x80") == '"\\u200b\U0001f600"'
    assert go_quote("\U000e0001") == '"\\U000e0001"'


def test_join_host_port() -> None:
    assert join_host_port("127.0.0.1", 4150) == "127.0.0.1:4150"
    assert join_host_port("::1", "4150") == "[::1]:4150"
