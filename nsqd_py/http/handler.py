"""gevent pywsgi's request handler, adjusted where Go's net/http (nsqd's server) behaves differently and
clients can tell:

* a request body the handler left unread: up to 256 KiB of it is read and dropped before the response goes
  out; when more remains, the response says `Connection: close`, the connection is closed (after a short
  lingering drain, so the client still gets to read the answer) and nothing more is read. pywsgi would read
  any amount to keep the connection alive;
* request headers: up to 1 MiB in any number of lines (Go's `DefaultMaxHeaderBytes`), else 431; a line
  without a colon is a 400, as in Go;
* response header names in Go's canonical form (`X-Nsq-Content-Type`), where Falcon lower-cases them;
* an answer's head and body leave in one write, and TCP_NODELAY is set, as Go does;
* no access log of its own (nsqd's comes from the app).
"""

from __future__ import annotations

import socket
from typing import Any

import gevent
from gevent.pywsgi import Input, WSGIHandler, WSGIServer

#: Go's maxPostHandlerReadBytes
_MAX_DRAIN = 256 << 10
#: Go's DefaultMaxHeaderBytes, plus the 4096 bytes of slack its reader allows
_MAX_HEADER_BYTES = (1 << 20) + 4096
#: how long a closing connection keeps reading what the client still sends (Go waits 500 ms)
_LINGER_SECONDS = 0.5
_HEADERS_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
                      b"Connection: close\r\n\r\n431 Request Header Fields Too Large")


class _HeadersTooLarge(ValueError):
    pass


class _RequestHeaders:
    """Request headers with the little pywsgi asks of them; email.parser (its default) costs ~0.1 ms a request.
    Names match case-insensitively, a repeated header answers with its first value, folded lines are joined."""

    __slots__ = ("_items", "status")

    def __init__(self, lines: list[str]) -> None:
        self.status = ""  # pywsgi rejects the request when this is set
        self._items: list[tuple[str, str]] = []
        for line in lines:
            if line[:1] in (" ", "\t") and self._items:
                name, value = self._items[-1]
                self._items[-1] = (name, f"{value} {line.strip()}")
                continue
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise ValueError(f"malformed MIME header line: {line.strip()!r}")
            self._items.append((name, value.strip()))

    def get(self, name: str, default: str | None = None) -> str | None:
        name = name.lower()
        for key, value in self._items:
            if key.lower() == name:
                return value
        return default

    getheader = get

    def __delitem__(self, name: str) -> None:
        name = name.lower()
        self._items = [(k, v) for k, v in self._items if k.lower() != name]

    @property
    def typeheader(self) -> str | None:
        return self.get("content-type")

    @property
    def headers(self) -> list[str]:
        return [f"{name}: {value}\r\n" for name, value in self._items]


class _Input(Input):
    """pywsgi's request body, which can be abandoned: then nothing more is read from the connection."""

    __slots__ = ("abandoned",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.abandoned = False

    def _discard(self) -> None:
        if not self.abandoned:
            super()._discard()

    def settle(self) -> bool:
        """Drop what is left of the body if it is small; False (and abandoned) when the connection can't
        be reused: more than 256 KiB left, a 100-continue never answered, or a broken body."""
        if not (self.chunked_input or self.content_length):
            return True
        # A client still waiting for "100 Continue" never sent its body; a long known rest is not worth reading.
        unanswered = self.socket is not None
        if unanswered or (not self.chunked_input and self.content_length - self.position > _MAX_DRAIN):
            self.abandoned = True
        else:
            try:
                self.abandoned = len(self.read(_MAX_DRAIN + 1)) > _MAX_DRAIN
            except (OSError, ValueError):
                self.abandoned = True
        return not self.abandoned


class Handler(WSGIHandler):
    def __init__(self, sock: socket.socket, address: Any, server: WSGIServer, rfile: Any = None) -> None:
        super().__init__(sock, address, server, rfile)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            # as Go does for every TCP connection: with Nagle on, a chunked answer's pieces or the next
            # pipelined answer would wait for the client's delayed ACK (~40 ms)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def MessageClass(self, fp: Any, *_args: Any) -> _RequestHeaders:  # pywsgi's hook name
        """The request headers, limited by total size like Go (not by line count like http.client)."""
        lines = []
        budget = _MAX_HEADER_BYTES - len(self.requestline)
        while True:
            line = fp.readline(budget + 1)
            budget -= len(line)
            if budget < 0:
                raise _HeadersTooLarge("request headers too large")
            if line in (b"\r\n", b"\n", b""):
                return _RequestHeaders(lines)
            lines.append(line.decode("latin-1"))

    def log_request(self) -> None:
        """nsqd's access log is the app's; pywsgi's would format a line per request for nothing."""

    def _write_with_headers(self, data: bytes) -> None:
        """pywsgi's, except that head and body leave in one send: one syscall and one packet per answer."""
        self.headers_sent = True
        self.finalize_headers()
        out = bytearray(b"HTTP/1.1 ")
        out += self.status + b"\r\n"
        for name, value in self.response_headers:
            out += name + b": " + value + b"\r\n"
        out += b"\r\n"
        if not self.response_use_chunked:
            out += data
            data = b""
        self._sendall(out)
        self._write(data)

    def _handle_client_error(self, ex: Exception) -> tuple[str, bytes]:
        if isinstance(ex, _HeadersTooLarge):
            return "431", _HEADERS_TOO_LARGE
        return super()._handle_client_error(ex)

    def get_environ(self) -> dict[str, Any]:
        env = super().get_environ()
        env["RAW_URI"] = self.path
        old = self.wsgi_input
        self.wsgi_input = _Input(old.rfile, old.content_length, socket=old.socket, chunked_input=old.chunked_input)
        if env["wsgi.input"] is old:
            env["wsgi.input"] = self.wsgi_input
        return env

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        return super().start_response(status, [(name.title(), value) for name, value in headers], exc_info)

    def finalize_headers(self) -> None:
        body = getattr(self, "wsgi_input", None)
        if isinstance(body, _Input) and not body.settle():
            self.response_headers = [(k, v) for k, v in self.response_headers if k.lower() != b"connection"]
            self.response_headers.append((b"Connection", b"close"))
            self.close_connection = True
        super().finalize_headers()

    def handle_one_request(self) -> Any:
        result = super().handle_one_request()
        body = getattr(self, "wsgi_input", None)
        if result is None and isinstance(body, _Input) and body.abandoned:
            self._linger()
        return result

    def _linger(self) -> None:
        """Close our side first and read for a moment, so the client is not reset before it reads the answer."""
        sock = self.socket
        try:
            sock.shutdown(socket.SHUT_WR)
            with gevent.Timeout(_LINGER_SECONDS, False):
                while sock.recv(65536):
                    pass
        except OSError:
            pass
