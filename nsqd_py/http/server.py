"""Serving the HTTP API inside the nsqd process on gevent's pywsgi, with Go net/http's connection rules.

pywsgi serves each connection in its own greenlet (a client trickling a request in holds up only itself).
Its handler is adjusted where Go's server behaves differently and clients can tell:

* a request body the handler left unread: up to 256 KiB of it is read and dropped before the response goes
  out; when more remains, the response says `Connection: close`, the connection is closed (after a short
  lingering drain, so the client still gets to read the answer) and nothing more is read. pywsgi would read
  any amount to keep the connection alive;
* request headers: up to 1 MiB in any number of lines (Go's `DefaultMaxHeaderBytes`), else 431;
* response header names in Go's canonical form (`X-Nsq-Content-Type`), where Falcon lower-cases them.
"""

from __future__ import annotations

import email.parser
import socket
from typing import Any

import gevent
from gevent.pywsgi import Input, OldMessage, WSGIHandler, WSGIServer

from ..core.nsqd import NSQD
from ..listen import display_address
from .app import create_app

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


class _Handler(WSGIHandler):
    def MessageClass(self, fp: Any, *_args: Any) -> OldMessage:  # pywsgi's hook name
        """The request headers, limited by total size like Go, not by line count like http.client."""
        lines = []
        budget = _MAX_HEADER_BYTES - len(self.requestline)
        while True:
            line = fp.readline(budget + 1)
            budget -= len(line)
            if budget < 0:
                raise _HeadersTooLarge("request headers too large")
            lines.append(line)
            if line in (b"\r\n", b"\n", b""):
                break
        message = email.parser.Parser(_class=OldMessage).parsestr(b"".join(lines).decode("iso-8859-1"))
        return message

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


class HTTPServer:
    def __init__(self, nsqd: NSQD, listener: socket.socket, name: str = "HTTP") -> None:
        self.nsqd = nsqd
        self.name = name
        self.address = display_address(listener)
        self._server = WSGIServer(listener, create_app(nsqd), log=None, error_log=None, handler_class=_Handler)

    def start(self) -> None:
        self.nsqd.logger.info(f"{self.name}: listening on {self.address}")
        self._server.start()

    def close(self) -> None:
        self.nsqd.logger.info(f"{self.name}: closing {self.address}")
        self._server.stop(timeout=1)
