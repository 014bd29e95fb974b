"""A lean HTTP/1.1 server for nsqd's WSGI app on gevent, keeping Go net/http's connection rules.

Why not gevent's pywsgi: with wrk (32 keep-alive connections, POST /pub, 200 B) pywsgi spent about
120 µs of the ~130 µs each request cost, while the Falcon app itself takes ~12 µs. This server parses
with a few bytes operations and answers in one write (figures in the README).

Rules kept from Go's server, because clients can tell:

* request head up to 1 MiB + 4 KiB in any number of lines, else 431; a header line without a colon
  (or with space before it) is a 400, as is a malformed request line;
* `Transfer-Encoding: chunked` wins over Content-Length; `Expect: 100-continue` is answered only
  when the app starts reading the body (a 413 decided from Content-Length sends no 100);
* a body the app left unread: up to 256 KiB is read and dropped so the connection lives on; with
  more, the answer says `Connection: close`, and the server reads for a moment before closing so
  the client is not reset before it reads the answer;
* canonical response header names (`X-Nsq-Content-Type`), a Date header, head and body in one
  write, TCP_NODELAY; HTTP/1.0 closes unless it asked for keep-alive; HEAD answers carry no body.
"""

from __future__ import annotations

import email.utils
import functools
import re
import socket
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote

import gevent
from gevent.server import StreamServer

from ..fairness import BusyGuard
from ..listen import send_all

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

#: Go's DefaultMaxHeaderBytes, plus the 4096 bytes of slack its reader allows
MAX_HEAD_BYTES = (1 << 20) + 4096
#: Go's maxPostHandlerReadBytes: an unread body rest up to this size is drained to keep the connection
MAX_DRAIN = 256 << 10
#: how long a closing connection keeps reading what the client still sends (Go waits 500 ms)
LINGER_SECONDS = 0.5
_RECV_SIZE = 65536
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
                   b"Connection: close\r\n\r\n431 Request Header Fields Too Large")
_BAD_REQUEST = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
                b"400 Bad Request")
_NO_BODY_STATUSES = ("1", "204", "304")


class BadRequest(ValueError):
    """The request cannot be parsed: answered 400 and the connection closes."""


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
            self._value = email.utils.formatdate(now, usegmt=True).encode()
        return self._value


_DATE = _Date()


class _Stream:
    """Buffered reading from the connection's socket."""

    __slots__ = ("_busy", "buf", "pos", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.pos = 0
        self._busy = BusyGuard()

    def fill(self) -> None:
        self._busy.check()  # a client whose requests never stop arriving must not keep the loop to itself
        data = self.sock.recv(_RECV_SIZE)
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
        """The next request head without its blank line; None when the peer closed between requests."""
        scanned = 0  # bytes after pos already searched (fill() may move pos, so count relative to it)
        while True:
            buf = self.buf
            while self.pos < len(buf) and buf[self.pos] in b"\r\n":  # blank lines between requests
                self.pos += 1
            match = _HEAD_END.search(buf, self.pos + max(scanned - 3, 0))
            if match:
                head = bytes(buf[self.pos : match.start()])
                self.pos = match.end()
                return head
            if self.available() > MAX_HEAD_BYTES:
                raise _HeadTooLarge
            scanned = self.available()
            try:
                self.fill()
            except _Closed:
                if self.available():
                    raise BadRequest("incomplete request head") from None
                return None

    def read_line(self, limit: int = 4096) -> bytes:
        while True:
            idx = self.buf.find(b"\n", self.pos)
            if idx >= 0:
                line = self.take(idx + 1 - self.pos)
                return line.rstrip(b"\r\n")
            if self.available() > limit:
                raise ValueError("chunk header line too long")
            self.fill()


class _HeadTooLarge(Exception):
    pass


_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


def parse_chunk_size(line: bytes) -> int:
    """A chunk-size line as Go's chunked reader reads it: trailing whitespace and any `;extension`
    dropped, then 1-16 hex digits and nothing else (no sign, `0x`, `_` or inner space)."""
    digits = line.rstrip(b" \t").split(b";", 1)[0]
    if not 0 < len(digits) <= 16 or not _HEX_DIGITS.issuperset(digits):
        raise ValueError("malformed chunked encoding")
    return int(digits, 16)


class _Body:
    """wsgi.input: a request body of known length or chunked; reads raise BrokenBody (a ValueError) when the
    body breaks off (the app answers 500 like nsqd's failed ReadAll)."""

    __slots__ = ("_broken", "_chunk_left", "_chunked", "_continue", "_done", "_left", "_sock", "_stream")

    def __init__(self, stream: _Stream, length: int, chunked: bool, expect_continue: bool) -> None:
        self._stream = stream
        self._sock = stream.sock
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
            self._sock.sendall(_CONTINUE)
        parts: list[bytes] = []
        want = sys.maxsize if size is None or size < 0 else size
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
                while stream.read_line():  # trailers until the blank line
                    pass
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
        name = listener.getsockname()
        self._server_name, self._server_port = (name[0], str(name[1])) if isinstance(name, tuple) else (name, "")

    def start(self) -> None:
        self._server.start()

    def stop(self, timeout: float = 1) -> None:
        self._server.stop(timeout=timeout)

    def _handle(self, sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            # as Go does: with Nagle on, the next pipelined answer would wait for a delayed ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        remote = address if isinstance(address, tuple) else ("", 0)
        stream = _Stream(sock)
        try:
            while self._serve_one(stream, remote):
                pass
        except (_Closed, OSError):
            pass
        finally:
            sock.close()

    def _serve_one(self, stream: _Stream, remote: tuple[Any, ...]) -> bool:
        """One request and its answer; False when the connection is done."""
        sock = stream.sock
        try:
            head = stream.read_head()
            if head is None:
                return False
            env, keep_alive, body = self._environ(head, stream, remote)
        except _HeadTooLarge:
            sock.sendall(_HEAD_TOO_LARGE)
            return False
        except BadRequest:
            sock.sendall(_BAD_REQUEST)
            return False
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
        send_all(sock, self._answer(response, data, keep_alive, env["REQUEST_METHOD"] == "HEAD"))
        if not reusable:
            _linger(sock)
        return keep_alive

    def _environ(self, head: bytes, stream: _Stream, remote: tuple[Any, ...]) -> tuple[dict[str, Any], bool, _Body]:
        lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not (parts[0].isascii() and parts[0].isalpha()):
            raise BadRequest("malformed request line")
        method, target, version = parts
        path, _, query = target.partition("?")
        env: dict[str, Any] = {
            "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": unquote(path, "latin-1"),
            "QUERY_STRING": query, "RAW_URI": target, "SERVER_PROTOCOL": version,
            "SERVER_NAME": self._server_name, "SERVER_PORT": self._server_port,
            "REMOTE_ADDR": str(remote[0]), "REMOTE_PORT": str(remote[1]) if len(remote) > 1 else "",
            "wsgi.version": (1, 0), "wsgi.url_scheme": self._scheme, "wsgi.errors": sys.stderr,
            "wsgi.multithread": False, "wsgi.multiprocess": False, "wsgi.run_once": False,
        }
        last = ""
        for line in lines[1:]:
            if line[:1] in (" ", "\t") and last:  # an obsolete folded continuation line
                env[last] = f"{env[last]} {line.strip()}"
                continue
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise BadRequest("malformed header line")
            key = _environ_key(name)
            value = value.strip()
            env[key] = f"{env[key]},{value}" if key in env and key.startswith("HTTP_") else value
            last = key
        chunked = "chunked" in env.get("HTTP_TRANSFER_ENCODING", "").lower()
        length = 0
        if chunked:
            env.pop("CONTENT_LENGTH", None)
        elif env.get("CONTENT_LENGTH") == "":  # Go ignores an empty Content-Length
            del env["CONTENT_LENGTH"]
        elif "CONTENT_LENGTH" in env:
            text = env["CONTENT_LENGTH"]
            if not (text.isascii() and text.isdigit()):
                raise BadRequest("bad Content-Length")
            length = int(text)
        expect_continue = env.get("HTTP_EXPECT", "").lower() == "100-continue"
        body = _Body(stream, length, chunked, expect_continue)
        env["wsgi.input"] = body
        connection = env.get("HTTP_CONNECTION", "").lower()
        keep_alive = "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        return env, keep_alive, body

    @staticmethod
    def _answer(response: _Response, data: bytes, keep_alive: bool, head_only: bool) -> bytes:
        out = bytearray(b"HTTP/1.1 ")
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
            out += b"Content-Length: %d\r\n" % len(data)
        out += b"Date: " + _DATE.get() + b"\r\n"
        if not keep_alive:
            out += b"Connection: close\r\n"
        out += b"\r\n"
        if not head_only:
            out += data
        return bytes(out)


@functools.lru_cache(maxsize=256)
def _environ_key(name: str) -> str:
    """`Content-Type` -> `CONTENT_TYPE`, `X-Foo` -> `HTTP_X_FOO` (the same few names arrive on every request)."""
    key = name.upper().replace("-", "_")
    return key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + key


def _linger(sock: socket.socket) -> None:
    """Close our side first and read for a moment, so the client is not reset before it reads the answer."""
    try:
        sock.shutdown(socket.SHUT_WR)
        with gevent.Timeout(LINGER_SECONDS, False):
            while sock.recv(_RECV_SIZE):
                pass
    except OSError:
        pass
