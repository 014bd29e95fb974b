"""Small Go-compatibility helpers shared by nsqd, nsqlookupd, the clients and the tools: Go's `%q`,
`net.JoinHostPort` and NSQ's versioned Accept header. Go's JSON struct decoding lives in gojson.py."""

from __future__ import annotations

#: the Accept value NSQ's HTTP clients send (to lookupd, auth servers, nsqd), so that servers older than
#: 1.0 answer in the unwrapped V1 shape too
NSQ_ACCEPT = "application/vnd.nsq; version=1.0"

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
            "\t": "\\t", "\v": "\\v"}


def go_quote(value: str | bytes) -> str:
    """Go's `strconv.Quote` (what `%q` prints). Bytes are read as UTF-8; an invalid byte prints as `\\xNN`,
    like one that reached a str through surrogateescape."""
    text = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte kept by surrogateescape
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def join_host_port(host: str, port: int | str) -> str:
    """Go's `net.JoinHostPort`: an IPv6 host goes in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
