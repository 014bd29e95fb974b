"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

A lean HTTP/1.1 server for a WSGI app (nsqd's, nsqlookupd's) on gevent, keeping Go net/http's
connection rules.

Why not gevent's pywsgi: with wrk (32 keep-alive connections, POST /pub, 200 B) pywsgi spent about
120 µs of the ~130 µs each request cost, while the Falcon app itself takes ~12 µs. This server parses
with a few bytes operations and answers in one write (figures in docs/benchmarks.md).

Rules kept from Go's server, because clients can tell:

* the head is read and refused as Go's server does (request_head.py): up to 1 MiB + 4 KiB, else 431;
  Go's 400/501/505 answers for malformed lines, headers, versions, Host, Transfer-Encoding and
  Content-Length, a malformed line answered as soon as it ends; `Expect:` other than 100-continue: 417;
* `Transfer-Encoding: chunked` wins over Content-Length; `Expect: 100-continue` is answered only
  when the app starts reading the body (a 413 decided from Content-Length sends no 100);
* a body the app left unread: up to 256 KiB is read and dropped so the connection lives on; with
  more, the answer says `Connection: close`, and the server reads for a moment before closing so
  the client is not reset before it reads the answer;
* canonical response header names (`X-Nsq-Content-Type`), a Date header, head and body in one
  write, TCP_NODELAY; HTTP/1.0 is answered as HTTP/1.0 and closes unless it asked for keep-alive;
  HEAD answers carry no body.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import gevent
from gevent.server import StreamServer

from ..runtime.fairness import BusyGuard
from ..runtime.outbox import Outbox
from .connection import Connection, PlainConnection, TLSConnection
from .request_head import (
    HEAD_TOO_LARGE,
    HeadError,
    RequestHead,
    bad_request,
    check_header_line,
    decode_path,
    has_token,
    parse_raw_head,
    parse_request_line,
)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

#: Go's DefaultMaxHeaderBytes, plus the 4096 bytes of slack its reader allows
MAX_HEAD_BYTES = (1 << 20) + 4096
#: Go's maxPostHandlerReadBytes: an unread body rest up to this size is drained to keep the connection
MAX_DRAIN = 256 << 10
#: how long a closing connection keeps reading what the client still sends (Go waits 500 ms)
LINGER_SECONDS = 0.5
_RECV_SIZE = 65536
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_EXPECTATION_FAILED = b"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: %s\r\nContent-Length: 0\r\n\r\n"
_NO_BODY_STATUSES = ("1", "204", "304")


class _Closed(Exception):
    """The peer went away."""


class BrokenBody(ValueError):
    """The request body broke off (bad chunking or EOF); ``partial`` holds what this read got before that."""

    def __init__(self, reason: str, partial: bytes) -> None:
        super().__init__(reason)
        self.partial = partial


class _Date:
    """The Date header value, formatted once per second."""

    __slots__ = ("_second", "_value")

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def get(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = http_date(now).encode()
        return self._value


_DATE = _Date()
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(seconds: int) -> str:
    """RFC 7231's date, as email.utils.formatdate(usegmt=True) writes it (without importing email: 3 ms of
    start-up)."""
    t = time.gmtime(seconds)
    return (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year:04d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")


class _Stream:
    """Buffered reading from the connection."""

    __slots__ = ("_busy", "buf", "conn", "pos")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.buf = bytearray()
        self.pos = 0
        self._busy = BusyGuard()

    def fill(self) -> None:
        self._busy.check()  # a client whose requests never stop arriving must not keep the loop to itself
        data = self.conn.recv(_RECV_SIZE)
        if not data:
            raise _Closed
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += data

    def available(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int) -> bytes:
        start = self.pos
        self.pos = start + n
        return bytes(self.buf[start : start + n])

    def read_head(self) -> bytes | None:
        """The next request head without its blank line; None when the peer closed between requests.

        While the head is incomplete its finished lines are checked, so a malformed request or header line is
        answered as soon as its line ends (as Go's line-by-line reader does), not after a blank line that a
        confused client (a TCP client on the HTTP port, say) never sends."""
        scanned = 0  # bytes after pos already searched (fill() may move pos, so count relative to it)
        checked = 0  # bytes after pos whose complete lines were checked
        while True:
            buf = self.buf
            start, end = _blank_line(buf, self.pos, self.pos + max(scanned - 2, 0))
            if end:
                if end - self.pos > MAX_HEAD_BYTES:
                    raise HeadError(HEAD_TOO_LARGE)
                head = bytes(buf[self.pos : start])
                self.pos = end
                return head
            if self.available() > MAX_HEAD_BYTES:
                raise HeadError(HEAD_TOO_LARGE)
            checked = self._check_head_lines(checked)
            scanned = self.available()
            try:
                self.fill()
            except _Closed:
                if not self.available():
                    return None
                # Go's reader takes a cut-off last line for a whole one and then meets the end: a malformed line is
                # refused as such, anything else with a plain 400 (io.ErrUnexpectedEOF); a half-closed client reads it
                self.buf += b"\n"
                self._check_head_lines(checked)
                raise bad_request() from None

    def _check_head_lines(self, checked: int) -> int:
        """Check the complete lines of an incomplete head from offset ``checked`` on; returns the new offset."""
        pos = self.pos
        end = self.buf.rfind(b"\n", pos + checked)
        if end < 0:
            return checked
        first_header = self.buf.find(b"\n", pos) + 1 - pos
        offset = checked
        for raw in bytes(self.buf[pos + checked : end]).split(b"\n"):
            line = raw.decode("latin-1").removesuffix("\r")
            if offset == 0:
                parse_request_line(line)
            else:
                check_header_line(line, first=offset == first_header)
            offset += len(raw) + 1
        return end + 1 - pos

    def read_line(self, limit: int = 4096) -> bytes:
        while True:
            idx = self.buf.find(b"\n", self.pos)
            if idx >= 0:
                line = self.take(idx + 1 - self.pos)
                return line.rstrip(b"\r\n")
            if self.available() > limit:
                raise ValueError("chunk header line too long")
            self.fill()


def _blank_line(buf: bytearray, head_start: int, search_from: int) -> tuple[int, int]:
    """Where the first `\\r?\\n\\r?\\n` from ``search_from`` on starts and ends (its CR may be just before); (0, 0)
    if there is none. A few finds of LF instead of a regex search, which tries every byte of the head."""
    crlf = buf.find(b"\r\n\r\n", max(search_from - 1, head_start))
    if crlf >= 0 and buf.find(b"\n\n", search_from, crlf + 2) < 0 and buf.find(b"\n\r\n", search_from, crlf + 3) < 0:
        return crlf, crlf + 4  # the usual head, all CRLF: three searches in C instead of a look at every line
    size = len(buf)
    lf = buf.find(b"\n", search_from)
    while lf >= 0:
        if lf + 1 < size and buf[lf + 1] == 10:
            end = lf + 2
        elif lf + 2 < size and buf[lf + 1] == 13 and buf[lf + 2] == 10:
            end = lf + 3
        else:
            lf = buf.find(b"\n", lf + 1)
            continue
        return (lf - 1 if lf > head_start and buf[lf - 1] == 13 else lf), end
    return 0, 0


_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


def parse_chunk_size(line: bytes) -> int:
    """A chunk-size line as Go 1.19's chunked reader reads it: trailing whitespace (CR and LF included) and any
    `;extension` dropped, then up to 16 hex digits and nothing else (no sign, `0x`, `_` or inner space). No
    digits at all is a size of 0, the last chunk (Go 1.19's parseHexUint)."""
    digits = line.rstrip(b" \t\r\n").split(b";", 1)[0]
    if len(digits) > 16 or not _HEX_DIGITS.issuperset(digits):
        raise ValueError("malformed chunked encoding")
    return int(digits, 16) if digits else 0


#: Go's server reads through a 4096-byte buffer: a chunked body's trailer must end within it
_TRAILER_WINDOW = 4096


def _read_trailer(stream: _Stream) -> None:
    """What follows the last chunk, read as Go's body.readTrailer does: the CRLF alone, or header lines whose
    blank line (CRLF CRLF) shows within the read buffer; until then it waits for more bytes, as Go does."""
    while stream.available() < 2:
        stream.fill()
    if stream.buf[stream.pos : stream.pos + 2] == b"\r\n":
        stream.take(2)
        return
    while stream.buf.find(b"\r\n\r\n", stream.pos, stream.pos + _TRAILER_WINDOW) < 0:
        if stream.available() >= _TRAILER_WINDOW:
            raise ValueError("suspiciously long trailer after chunked body")
        stream.fill()
    first = True
    while line := stream.read_line():  # textproto's header syntax, up to the first blank line
        folded = line[:1] in (b" ", b"\t")
        if (first and folded) or (not folded and b":" not in line):
            raise ValueError("malformed MIME header line")
        first = False


class _Body:
    """wsgi.input: a request body of known length or chunked; reads raise BrokenBody (a ValueError) when the
    body breaks off (nsqd's app answers 500, as to its failed ReadAll)."""

    __slots__ = ("_broken", "_chunk_left", "_chunked", "_conn", "_continue", "_done", "_left", "_stream")

    def __init__(self, stream: _Stream, length: int, chunked: bool, expect_continue: bool) -> None:
        self._stream = stream
        self._conn = stream.conn
        self._chunked = chunked
        self._left = length
        self._chunk_left = 0
        self._done = not chunked and length == 0
        self._continue = expect_continue and not self._done
        self._broken = False

    def read(self, size: int = -1) -> bytes:
        if self._broken:
            raise ValueError("request body already failed")
        if self._done or size == 0:
            return b""
        if self._continue:
            self._continue = False
            self._conn.write(_CONTINUE)
        want = sys.maxsize if size is None or size < 0 else size
        if not self._chunked and self._left <= want and self._left <= self._stream.available():
            return self._take_rest()  # the usual small body, which arrived with its head
        parts: list[bytes] = []
        try:
            while want > 0 and not self._done:
                piece = self._read_chunked(want) if self._chunked else self._read_length(want)
                if not piece and not self._done:  # every turn must consume input or finish
                    raise ValueError("request body made no progress")
                parts.append(piece)
                want -= len(piece)
        except (_Closed, OSError, ValueError) as exc:
            self._broken = True  # nothing may read on from a stream whose framing is lost
            reason = "unexpected EOF" if isinstance(exc, _Closed) else str(exc) or type(exc).__name__
            raise BrokenBody(reason, b"".join(parts)) from None
        return b"".join(parts)

    def _take_rest(self) -> bytes:
        piece = self._stream.take(self._left)
        self._left = 0
        self._done = True
        return piece

    def _read_length(self, want: int) -> bytes:
        stream = self._stream
        if not stream.available():
            stream.fill()
        piece = stream.take(min(want, self._left, stream.available()))
        self._left -= len(piece)
        self._done = self._left == 0
        return piece

    def _read_chunked(self, want: int) -> bytes:
        stream = self._stream
        if self._chunk_left == 0:
            self._chunk_left = parse_chunk_size(stream.read_line())
            if self._chunk_left == 0:
                _read_trailer(stream)
                self._done = True
                return b""
        if not stream.available():
            stream.fill()
        piece = stream.take(min(want, self._chunk_left, stream.available()))
        self._chunk_left -= len(piece)
        if self._chunk_left == 0:
            while stream.available() < 2:
                stream.fill()
            if stream.take(2) != b"\r\n":  # Go wants exactly CRLF after the chunk data
                raise ValueError("malformed chunked encoding")
        return piece

    def settle(self) -> bool:
        """Drop a small unread rest; False when the connection cannot be reused (a large or broken
        rest, or a 100-continue the client still waits for)."""
        if self._done:
            return True
        if self._broken or self._continue or (not self._chunked and self._left > MAX_DRAIN):
            return False
        try:
            return len(self.read(MAX_DRAIN + 1)) <= MAX_DRAIN and self._done
        except ValueError:
            return False


class _Response:
    __slots__ = ("headers", "status")

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []

    def start(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        self.status = status
        self.headers = headers
        return _no_write


def _no_write(data: bytes) -> None:
    raise NotImplementedError("write() is not supported; return the body from the app")


class WSGIServer:
    """Serves a WSGI app on a listening socket (TLS when given a context), one greenlet per connection."""

    def __init__(self, listener: socket.socket, app: WSGIApp, ssl_context: Any = None) -> None:
        self.app = app
        self._scheme = "https" if ssl_context is not None else "http"
        kwargs = {"ssl_context": ssl_context} if ssl_context is not None else {}
        self._server = StreamServer(listener, self._handle, **kwargs)
        self._tls = ssl_context is not None
        self._outbox: Outbox | None = None  # made in the hub's thread, on the first connection
        name = listener.getsockname()
        server_name, server_port = (name[0], str(name[1])) if isinstance(name, tuple) else (name, "")
        #: the environ entries every request on this server shares
        self._base_environ: dict[str, Any] = {
            "SCRIPT_NAME": "", "SERVER_NAME": server_name, "SERVER_PORT": server_port,
            "wsgi.version": (1, 0), "wsgi.url_scheme": self._scheme, "wsgi.errors": sys.stderr,
            "wsgi.multithread": False, "wsgi.multiprocess": False, "wsgi.run_once": False,
        }

    def start(self) -> None:
        self._server.start()

    def stop(self, timeout: float = 1) -> None:
        self._server.stop(timeout=timeout)

    def _handle(self, sock: socket.socket, address: Any) -> None:
        tcp = sock.family in (socket.AF_INET, socket.AF_INET6)
        conn = self._connection(sock)
        try:
            if tcp:  # as Go does: with Nagle on, the next pipelined answer would wait for a delayed ACK
                conn.set_nodelay()
            remote = address if isinstance(address, tuple) else ("", 0)
            connection_environ = self._base_environ.copy()
            connection_environ["REMOTE_ADDR"] = str(remote[0])
            connection_environ["REMOTE_PORT"] = str(remote[1]) if len(remote) > 1 else ""
            stream = _Stream(conn)
            while self._serve_one(stream, connection_environ):
                pass
            conn.flush()
        except (_Closed, OSError):
            pass
        finally:
            conn.close()

    def _connection(self, sock: socket.socket) -> Connection:
        if self._tls:
            return TLSConnection(sock)
        if self._outbox is None:
            self._outbox = Outbox()
        return PlainConnection(sock, self._outbox)

    def _serve_one(self, stream: _Stream, connection_environ: dict[str, Any]) -> bool:
        """One request and its answer; False when the connection is done."""
        conn = stream.conn
        try:
            raw_head = stream.read_head()
            if raw_head is None:
                return False
            head = parse_raw_head(raw_head)
        except HeadError as err:
            if err.answer:
                conn.write(err.answer)
                _linger(conn)
            return False
        expect = head.fields.get("HTTP_EXPECT")
        expect_continue = False
        if expect is not None:
            expect_continue = has_token(expect, "100-continue")
            if not expect_continue and expect:
                conn.write(_EXPECTATION_FAILED % _DATE.get())
                _linger(conn)
                return False
        env, keep_alive, body = _environ(connection_environ, head, stream, expect_continue and head.minor >= 1)
        response = _Response()
        result = self.app(env, response.start)
        try:
            data = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        reusable = body.settle()
        keep_alive = keep_alive and reusable
        conn.write(self._answer(response, data, keep_alive, head))
        if not reusable:
            _linger(conn)
        return keep_alive

    @staticmethod
    def _answer(response: _Response, data: bytes, keep_alive: bool, head: RequestHead) -> bytes:
        """The answer in one piece; its head (all but the Date) is built once per distinct status, headers and
        connection outcome (nsqd's answers are few: /pub's 200 OK is always the same)."""
        http10 = head.minor == 0
        key = (response.status, tuple(response.headers), http10, keep_alive, len(data))
        parts = _ANSWER_HEADS.get(key)
        if parts is None:
            if len(_ANSWER_HEADS) >= _ANSWER_HEADS_MAX:
                _ANSWER_HEADS.clear()
            parts = _ANSWER_HEADS[key] = _answer_head(response, len(data), keep_alive, http10)
        answer = parts[0] + _DATE.get() + parts[1]
        return answer if head.method == "HEAD" else answer + data


def _environ(connection_environ: dict[str, Any], head: RequestHead, stream: _Stream,
             expect_continue: bool) -> tuple[dict[str, Any], bool, _Body]:
    env = connection_environ.copy()
    env["REQUEST_METHOD"] = head.method
    env["PATH_INFO"] = decode_path(head.path)
    env["QUERY_STRING"] = head.query
    env["RAW_URI"] = head.target
    env["SERVER_PROTOCOL"] = head.version
    env.update(head.fields)
    body = _Body(stream, head.content_length, head.chunked, expect_continue)
    env["wsgi.input"] = body
    connection = head.fields.get("HTTP_CONNECTION", "").lower()
    keep_alive = "keep-alive" in connection if head.minor == 0 else "close" not in connection
    return env, keep_alive, body


#: answer heads by (status, headers, HTTP/1.0, keep-alive, body length), as _answer_head built them
_ANSWER_HEADS: dict[tuple[str, tuple[tuple[str, str], ...], bool, bool, int], tuple[bytes, bytes]] = {}
_ANSWER_HEADS_MAX = 512


def _answer_head(response: _Response, length: int, keep_alive: bool, http10: bool) -> tuple[bytes, bytes]:
    """An answer's head, split around the Date value. The status line names the request's version as Go's does
    (`HTTP/1.0` to a 1.0 client, which is told `Connection: keep-alive` when it may keep the connection, and
    nothing when it may not)."""
    out = bytearray(b"HTTP/1.0 " if http10 else b"HTTP/1.1 ")
    out += response.status.encode("latin-1")
    out += b"\r\n"
    has_length = False
    for name, value in response.headers:
        lower = name.lower()
        if lower == "connection":
            continue
        has_length = has_length or lower == "content-length"
        out += f"{name.title()}: {value}\r\n".encode("latin-1")
    if not has_length and not response.status.startswith(_NO_BODY_STATUSES):
        out += b"Content-Length: %d\r\n" % length
    out += b"Date: "
    tail = b"\r\n"
    if http10:
        if keep_alive:
            tail += b"Connection: keep-alive\r\n"
    elif not keep_alive:
        tail += b"Connection: close\r\n"
    return bytes(out), tail + b"\r\n"


def _linger(conn: Connection) -> None:
    """Send the answer, close our side first and read for a moment, so the client is not reset before it reads
    the answer."""
    try:
        conn.flush()
        conn.shutdown_write()
        with gevent.Timeout(LINGER_SECONDS, False):
            while conn.recv(_RECV_SIZE):
                pass
    except OSError:
        pass
