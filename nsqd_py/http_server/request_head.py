"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

A request head read with Go net/http's rules (Go 1.19, which nsqd 1.3.0 is built with), so the same bytes get
the same answer: what Go refuses before the handler runs is refused here with Go's status line and body.

The checks come in Go's order: the request line (method token, version syntax, request URI), the header lines,
then Transfer-Encoding / Content-Length, the protocol major version (505), Host, header names and values.
`Expect:` (417) is the server's concern, after the head.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import unquote

_ERROR_HEADERS = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"


class HeadError(Exception):
    """The head is refused before the app sees it; ``answer`` is the whole response Go sends, then it closes."""

    def __init__(self, answer: bytes) -> None:
        super().__init__(answer.split(b"\r\n", 1)[0].decode("latin-1"))
        self.answer = answer


def _public_error(status: str, reason: str = "") -> HeadError:
    public = f"{status}: {reason}" if reason else status
    return HeadError(f"HTTP/1.1 {public}{_ERROR_HEADERS}{public}".encode("latin-1"))


def bad_request(reason: str = "") -> HeadError:
    return _public_error("400 Bad Request", reason)


HEAD_TOO_LARGE = _public_error("431 Request Header Fields Too Large").answer
UNSUPPORTED_TRANSFER_ENCODING = HeadError(
    f"HTTP/1.1 501 Not Implemented{_ERROR_HEADERS}Unsupported transfer encoding".encode())
_UNSUPPORTED_VERSION = ("505 HTTP Version Not Supported", "unsupported protocol version")

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
#: control bytes Go refuses in the request URI and in header values (a tab is allowed in values)
_CTL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
_CTL_IN_URI = re.compile("[\x00-\x1f\x7f]")
#: any control byte but the line feeds: a head without one needs no check per value
_CTL_IN_HEAD = re.compile("[\x00-\x09\x0b-\x1f\x7f]")
_HOST = re.compile(r"[0-9A-Za-z!$%&'()*+,\-.:;=\[\]_~]*\Z")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_DIGITS = re.compile(r"[0-9]+\Z")
_INT63_MAX = (1 << 63) - 1


class RequestHead:
    """The parts of a parsed head the server needs; ``fields`` maps WSGI environ keys to values."""

    __slots__ = ("chunked", "content_length", "fields", "method", "minor", "path", "query", "reads_transfer_encoding",
                 "target", "version")

    def __init__(self, method: str, target: str, version: str, major: int, minor: int, path: str, query: str) -> None:
        self.method = method
        self.target = target
        self.version = version
        #: HTTP/1.minor; -1 for another major version (refused with 505 once the head is known well-formed)
        self.minor = minor if major == 1 else -1
        #: Go's readTransfer looks at Transfer-Encoding from HTTP/1.1 on, and for `HTTP/0.0` (which it takes
        #: for 1.1); on HTTP/1.0 and HTTP/0.x it is ignored
        self.reads_transfer_encoding = (major, minor) >= (1, 1) or (major, minor) == (0, 0)
        self.path = path
        self.query = query
        self.fields: dict[str, str] = {}
        self.chunked = False
        self.content_length = 0


def _parse_version(version: str) -> tuple[int, int]:
    """Go's ParseHTTPVersion: `HTTP/X.Y` with one digit each; anything else is a 400."""
    if version == "HTTP/1.1":
        return 1, 1
    if version == "HTTP/1.0":
        return 1, 0
    if len(version) != 8 or not version.startswith("HTTP/") or version[6] != "." \
            or not (version[5].isdigit() and version[7].isdigit() and version[5:8:2].isascii()):
        raise bad_request()
    return int(version[5]), int(version[7])


def _split_target(target: str, clean: bool) -> tuple[str, str]:
    """Go's url.ParseRequestURI, the parts our router needs: (path, raw query). ``clean``: the head is known
    to hold no control bytes."""
    if not target or (not clean and _CTL_IN_URI.search(target)):
        raise bad_request()
    if target == "*":  # only the whole target: `*?query` is no request URI to Go
        return "*", ""
    rest, _, query = target.partition("?")
    if not rest.startswith("/"):
        scheme = _SCHEME.match(rest)
        if scheme is None:
            raise bad_request()
        rest = rest[scheme.end():]
        if rest.startswith("//"):  # an absolute URL: the path follows the authority
            slash = rest.find("/", 2)
            rest = rest[slash:] if slash >= 0 else ""
        else:
            rest = ""  # an opaque URI (`mailto:x`) has no path
    if "%" in rest and _BAD_ESCAPE.search(rest):
        raise bad_request()
    return rest, query


def parse_request_line(line: str, clean: bool = False) -> RequestHead:
    """`METHOD SP URI SP VERSION`, split as Go splits it (at the first two spaces)."""
    method, sep1, rest = line.partition(" ")
    target, sep2, version = rest.partition(" ")
    if not (sep1 and sep2) or not _TOKEN.match(method):
        raise bad_request()
    major, minor = _parse_version(version)
    path, query = _split_target(target, clean)
    return RequestHead(method, target, version, major, minor, path, query)


def check_header_line(line: str, first: bool) -> None:
    """The syntax textproto checks while reading: a colon, and no continuation as the first header line."""
    if (first and line[:1] in (" ", "\t")) or (":" not in line and line[:1] not in (" ", "\t")):
        raise bad_request()


@functools.lru_cache(maxsize=256)
def environ_key(name: str) -> str | None:
    """`Content-Type` -> `CONTENT_TYPE`, `X-Foo` -> `HTTP_X_FOO`; None for a name that is not an HTTP token."""
    if not _TOKEN.match(name):
        return None
    key = name.upper().replace("-", "_")
    return key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + key


def parse_head(text: str) -> RequestHead:
    """A whole head (latin-1 text, lines ending in LF or CRLF, without the blank line) -> RequestHead.

    Raises HeadError with Go's answer for anything Go's server refuses."""
    text = text.replace("\r\n", "\n")
    clean = _CTL_IN_HEAD.search(text) is None  # the usual case: no value or URI needs a look of its own
    lines = text.split("\n")
    head = parse_request_line(lines[0], clean)
    fields = head.fields
    repeated: dict[str, list[str]] = {}
    bad_name = bad_value = False
    last = ""
    for index, line in enumerate(lines[1:]):
        if line[:1] in (" ", "\t"):  # an obsolete folded continuation of the previous line
            if index == 0:
                raise bad_request()
            if last:  # textproto joins it with one space and trims the whole value (an empty one included)
                fields[last] = (fields[last] + " " + line.strip(" \t")).strip(" \t")
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise bad_request()
        if not name:
            continue  # Go skips a header line with an empty name
        value = value.strip(" \t")
        key = environ_key(name)
        if key is None:
            bad_name = True
            key = "HTTP_" + name.upper().replace("-", "_")
        if not clean and key != "HTTP_TRANSFER_ENCODING" and _CTL.search(value):
            bad_value = True  # (Go deletes Transfer-Encoding from the header before it checks the values)
        if key in fields:
            repeated.setdefault(key, [fields[key]]).append(value)
            fields[key] = f"{fields[key]},{value}"
        else:
            fields[key] = value
        last = key
    if "HTTP_HOST" in repeated:
        raise bad_request()
    _body_framing(head, repeated)
    if head.minor < 0:
        raise _public_error(*_UNSUPPORTED_VERSION)
    if "HTTP_HOST" not in fields:
        if head.minor >= 1:
            raise bad_request("missing required Host header")
    elif not _HOST.match(fields["HTTP_HOST"]):
        raise bad_request("malformed Host header")
    if bad_name:
        raise bad_request("invalid header name")
    if bad_value:
        raise bad_request("invalid header value")
    return head


#: heads parsed lately: a client repeats its head byte for byte (the same path, headers and body size), and the
#: look-up costs a tenth of a parse. Only heads that parsed, and short ones; nothing changes a head once parsed.
_parsed_heads: dict[bytes, RequestHead] = {}
_PARSED_HEADS_LIMIT = 512
_PARSED_HEAD_MAX_BYTES = 1024


def parse_raw_head(raw: bytes) -> RequestHead:
    """parse_head of the bytes read, remembered for the next request with the same head."""
    head = _parsed_heads.get(raw)
    if head is None:
        head = parse_head(raw.decode("latin-1"))
        if len(raw) <= _PARSED_HEAD_MAX_BYTES:
            if len(_parsed_heads) >= _PARSED_HEADS_LIMIT:
                _parsed_heads.clear()
            _parsed_heads[raw] = head
    return head


def _body_framing(head: RequestHead, repeated: dict[str, list[str]]) -> None:
    """Go's readTransfer: `Transfer-Encoding` must be exactly one `chunked` (ignored below HTTP/1.1), else 501;
    Content-Length a non-negative int63, repeated only with the same value, else 400."""
    fields = head.fields
    if "HTTP_TRANSFER_ENCODING" in fields:
        encoding = fields.pop("HTTP_TRANSFER_ENCODING")
        if head.reads_transfer_encoding:
            if "HTTP_TRANSFER_ENCODING" in repeated or encoding.lower() != "chunked":
                raise UNSUPPORTED_TRANSFER_ENCODING
            head.chunked = True
            fields.pop("CONTENT_LENGTH", None)
            return
    if "CONTENT_LENGTH" not in fields:
        return
    values = repeated.get("CONTENT_LENGTH")
    if values is not None:
        if any(value != values[0] for value in values):
            raise bad_request()
        fields["CONTENT_LENGTH"] = values[0]
    text = fields["CONTENT_LENGTH"]
    if text == "":  # Go ignores an empty Content-Length
        del fields["CONTENT_LENGTH"]
        return
    if not _DIGITS.match(text) or int(text) > _INT63_MAX:
        raise bad_request()
    head.content_length = int(text)


def has_token(value: str, token: str) -> bool:
    """Go's hasToken: ``token`` (lower case) appears in ``value``, any case, bounded by the start or end, a space, a
    tab or a comma on each side (`Expect: x: 100-continue` asks for 100-continue as far as Go is concerned)."""
    lowered = value.lower()
    at = lowered.find(token)
    while at >= 0:
        end = at + len(token)
        if (at == 0 or lowered[at - 1] in " \t,") and (end == len(lowered) or lowered[end] in " \t,"):
            return True
        at = lowered.find(token, at + 1)
    return False


def decode_path(path: str) -> str:
    """PATH_INFO as WSGI wants it: percent-decoded, as latin-1 text."""
    return unquote(path, "latin-1") if "%" in path else path
