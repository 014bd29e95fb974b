"""Protocol V2 error replies: `<CODE> <description>` frames, fatal ones close the connection."""

from __future__ import annotations


class ClientError(Exception):
    """An error the client caused; sent as an error frame. Only FIN/REQ/TOUCH failures are non-fatal."""

    fatal = False

    def __init__(self, code: str, description: str) -> None:
        super().__init__(f"{code} {description}")
        self.code = code
        self.description = description

    @property
    def payload(self) -> bytes:
        return f"{self.code} {self.description}".encode("utf-8", "surrogateescape")


class FatalClientError(ClientError):
    """Sent, then the connection is closed."""

    fatal = True


def client_text(raw: bytes) -> str:
    """Bytes a client sent, for an error text that echoes them: Go echoes them unchanged, so invalid UTF-8
    is kept (as surrogate escapes that ``payload`` turns back into the same bytes)."""
    return raw.decode("utf-8", "surrogateescape")


def go_quote(raw: bytes) -> str:
    """Render bytes like Go's `%q` on a string: escapes for quotes, controls and invalid UTF-8."""
    out = ['"']
    text = raw.decode("utf-8", "surrogateescape")
    simple = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
              "\t": "\\t", "\v": "\\v"}
    for ch in text:
        code = ord(ch)
        if ch in simple:
            out.append(simple[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte kept by surrogateescape
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif not ch.isprintable():
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
