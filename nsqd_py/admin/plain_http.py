"""Keep-alive HTTP/1.1 GETs over plain TCP, for nsqadmin's queries to nsqd and nsqlookupd.

A page asks every node for its /stats and every lookupd for its lists; through urllib3 each query paid more for the
client (http.client's header parsing through the email package, the pool's bookkeeping) than nsqadmin's own work on
the answer (bench/bench_nsqadmin.py). These answers are simple - a status, Content-Length or chunked, JSON - so a GET
to an `http://` address is read here; HTTPS and POSTs stay with urllib3 (upstream.py).
"""

from __future__ import annotations

import socket

#: idle connections kept per node: the greenlets of one page may ask a node several things at once
MAX_IDLE = 16
_RECV_SIZE = 65536
_MAX_HEAD = 1 << 16


class ConnectFailed(Exception):
    """The connection could not be made; ``cause`` is the OSError (a timeout among them)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class AnswerFailed(Exception):
    """Connected, but no whole answer came: ``timed_out``, or the connection ended (EOF) or broke."""

    def __init__(self, timed_out: bool, cause: OSError | None = None) -> None:
        super().__init__("timeout" if timed_out else str(cause or "EOF"))
        self.timed_out = timed_out
        self.cause = cause


class _Stale(Exception):
    """A kept connection the server had closed before this request: try a new one."""


class PlainHTTP:
    def __init__(self, connect_timeout: float, request_timeout: float, headers: dict[str, str]) -> None:
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._headers = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._idle: dict[tuple[str, int], list[socket.socket]] = {}

    def get(self, host: str, port: int, target: str) -> tuple[int, bytes]:
        """GET ``target`` (path and query) from ``host:port``: the status and the body."""
        key = (host, port)
        request = f"GET {target} HTTP/1.1\r\nHost: {_host_header(host, port)}\r\n{self._headers}\r\n".encode()
        idle = self._idle.get(key)
        while idle:
            try:
                return self._exchange(idle.pop(), key, request, reused=True)
            except _Stale:
                continue
        try:
            sock = socket.create_connection(key, timeout=self.connect_timeout)
        except OSError as err:
            raise ConnectFailed(err) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._exchange(sock, key, request, reused=False)

    def close(self) -> None:
        for idle in self._idle.values():
            for sock in idle:
                sock.close()
        self._idle.clear()

    def _exchange(self, sock: socket.socket, key: tuple[str, int], request: bytes, reused: bool) -> tuple[int, bytes]:
        keep = False
        try:
            sock.settimeout(self.request_timeout)
            try:
                sock.sendall(request)
                status, body, keep = _read_answer(sock)
            except _Ended as ended:
                if reused and not ended.got_bytes:
                    raise _Stale() from None
                raise AnswerFailed(False) from None
            except TimeoutError:
                raise AnswerFailed(True) from None
            except OSError as err:
                if reused:
                    raise _Stale() from None
                raise AnswerFailed(False, err) from None
            except ValueError:  # not an HTTP answer
                raise AnswerFailed(False) from None
            return status, body
        finally:
            idle = self._idle.setdefault(key, [])
            if keep and len(idle) < MAX_IDLE:
                idle.append(sock)
            else:
                sock.close()


class _Ended(Exception):
    """The server closed the connection before the whole answer."""

    def __init__(self, got_bytes: bool) -> None:
        super().__init__("EOF")
        self.got_bytes = got_bytes


class _Reader:
    """The bytes read from the socket and how far they are consumed: a bytearray appended to in place and trimmed
    only when the consumed part is at least half of it, so a body of any size costs linear time (``bytes +=`` and
    re-slicing the rest after each piece copied the whole buffer every time: quadratic on a large /stats)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.pos = 0
        self.got_bytes = False

    def fill(self) -> None:
        data = self.sock.recv(_RECV_SIZE)
        if not data:
            raise _Ended(self.got_bytes)
        self.got_bytes = True
        if self.pos and self.pos * 2 >= len(self.buf):
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += data

    def unread(self) -> int:
        return len(self.buf) - self.pos

    def until(self, marker: bytes, limit: int = _MAX_HEAD) -> bytes:
        searched = 0  # bytes past pos already searched (the marker may straddle the next read)
        while True:
            at = self.buf.find(marker, self.pos + searched)
            if at >= 0:
                found = bytes(self.buf[self.pos:at])
                self.pos = at + len(marker)
                return found
            if self.unread() > limit:
                raise _Ended(True)
            searched = max(0, self.unread() - len(marker) + 1)
            self.fill()

    def exactly(self, size: int) -> bytes:
        while self.unread() < size:
            self.fill()
        found = bytes(self.buf[self.pos:self.pos + size])
        self.pos += size
        return found

    def rest(self) -> bytes:
        try:
            while True:
                self.fill()
        except _Ended:
            return bytes(self.buf[self.pos:])


#: interim (1xx) answers skipped before the final one, as Go's net/http Transport allows (max1xxResponses)
_MAX_INTERIM = 5


def _read_head(reader: _Reader) -> tuple[str, int, dict[str, str]]:
    """The status line's version and code, and the header fields by lower-case name."""
    head = reader.until(b"\r\n\r\n").decode("latin-1").split("\r\n")
    version, _, rest = head[0].partition(" ")
    status = int(rest[:3])
    fields: dict[str, str] = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return version, status, fields


def _read_answer(sock: socket.socket) -> tuple[int, bytes, bool]:
    """(status, body, whether the connection may serve another request)."""
    reader = _Reader(sock)
    version, status, fields = _read_head(reader)
    interim = 0
    while 100 <= status < 200 and status != 101:  # 100 Continue, 103 Early Hints ...: the final answer follows
        interim += 1
        if interim > _MAX_INTERIM:
            raise ValueError("too many 1xx informational responses")
        version, status, fields = _read_head(reader)
    keep = version == "HTTP/1.1" and fields.get("connection", "").lower() != "close"
    if status == 101:  # switching protocols, never asked for: the connection is no longer HTTP
        return status, b"", False
    if status in (204, 304):
        return status, b"", keep and not reader.unread()
    if fields.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(reader.until(b"\r\n").split(b";", 1)[0], 16)
            if size == 0:
                while reader.until(b"\r\n"):  # trailers, up to the blank line
                    pass
                break
            chunks.append(reader.exactly(size))
            reader.exactly(2)
        return status, b"".join(chunks), keep and not reader.unread()
    if "content-length" in fields:
        body = reader.exactly(int(fields["content-length"]))
        return status, body, keep and not reader.unread()
    return status, reader.rest(), False


def _host_header(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
