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
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.got_bytes = False

    def fill(self) -> None:
        data = self.sock.recv(_RECV_SIZE)
        if not data:
            raise _Ended(self.got_bytes)
        self.got_bytes = True
        self.buf += data

    def until(self, marker: bytes, limit: int = _MAX_HEAD) -> bytes:
        while True:
            at = self.buf.find(marker)
            if at >= 0:
                found, self.buf = self.buf[:at], self.buf[at + len(marker):]
                return found
            if len(self.buf) > limit:
                raise _Ended(True)
            self.fill()

    def exactly(self, size: int) -> bytes:
        while len(self.buf) < size:
            self.fill()
        found, self.buf = self.buf[:size], self.buf[size:]
        return found

    def rest(self) -> bytes:
        try:
            while True:
                self.fill()
        except _Ended:
            return self.buf


def _read_answer(sock: socket.socket) -> tuple[int, bytes, bool]:
    """(status, body, whether the connection may serve another request)."""
    reader = _Reader(sock)
    head = reader.until(b"\r\n\r\n").decode("latin-1").split("\r\n")
    version, _, rest = head[0].partition(" ")
    status = int(rest[:3])
    fields: dict[str, str] = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    keep = version == "HTTP/1.1" and fields.get("connection", "").lower() != "close"
    if status in (204, 304) or 100 <= status < 200:
        return status, b"", keep
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
        return status, b"".join(chunks), keep and not reader.buf
    if "content-length" in fields:
        body = reader.exactly(int(fields["content-length"]))
        return status, body, keep and not reader.buf
    return status, reader.rest(), False


def _host_header(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
