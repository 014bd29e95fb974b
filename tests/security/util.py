"""Helpers for the security tests: a protocol V2 client that performs IDENTIFY's upgrades itself (stdlib ``ssl``,
python-snappy and ``zlib`` -- deliberately *not* the server's own codecs), and a scriptable HTTP auth server.

Every wait that may overlap with gnsq greenlets yields to gevent (``tests.clients.util.wait_until``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import snappy

from nsqd_py.client.protocol import mpub_body
from tests.support import FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, RawConn

__all__ = ["FRAME_ERROR", "FRAME_MESSAGE", "FRAME_RESPONSE", "AuthServer", "SecureConn", "client_context",
           "mpub_body", "rss_kib"]


def client_context(ca: Path | None, cert: Path | None = None, key: Path | None = None,
                   max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A client context that verifies the server against ``ca`` (hostname 127.0.0.1 is in the SAN)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.load_verify_locations(ca)
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    if max_version is not None:
        ctx.maximum_version = max_version
    return ctx


class SecureConn(RawConn):
    """A :class:`RawConn` on which :meth:`negotiate` runs IDENTIFY and the upgrades the server granted (TLS, then
    snappy or deflate), checking the ``OK`` after each; afterwards :meth:`send`/:meth:`frame` transparently go
    through the negotiated layers (``buf`` holds decoded bytes). :meth:`send_wire` bypasses compression."""

    def __init__(self, port: int | socket.socket, magic: bytes = b"  V2", timeout: float = 5) -> None:
        super().__init__(port, magic=magic, timeout=timeout)
        self._encode: Callable[[bytes], bytes] = lambda data: data
        self._decode: Callable[[bytes], bytes] = lambda data: data
        self.identify_reply: dict[str, Any] = {}

    # ---- the transport ------------------------------------------------------------------------

    def send_wire(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(self._encode(data))

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        return self._decode(chunk) if chunk else chunk

    def expect(self, ftype: int, data: bytes) -> None:
        got = self.frame()
        assert got == (ftype, data), got

    def is_closed(self, wait: float = 3.0) -> bool:
        """True when the server closes the connection (EOF, reset or a TLS alert) within ``wait`` seconds;
        anything received meanwhile is kept in ``self.buf`` (undecoded if decoding fails)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except (OSError, ssl.SSLError):
                return True
            if not chunk:
                return True
            try:
                self.buf += self._decode(chunk)
            except Exception:
                self.buf += chunk
        return False

    def error_then_closed(self) -> bytes:
        """Read the fatal error frame the server sends and check that it then closes the connection."""
        ftype, data = self.frame()
        assert ftype == FRAME_ERROR, (ftype, data)
        assert self.is_closed(), f"connection still open after {data!r}"
        return data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            super().close()

    # ---- IDENTIFY and upgrades ------------------------------------------------------------------

    def identify_raw(self, **fields: Any) -> tuple[int, bytes]:
        self.send("IDENTIFY", json.dumps({"feature_negotiation": True, **fields}).encode())
        return self.frame()

    def negotiate(self, tls: ssl.SSLContext | None = None, **fields: Any) -> dict[str, Any]:
        """IDENTIFY (``tls_v1`` is asked for when ``tls`` is given) and perform every granted upgrade."""
        if tls is not None:
            fields.setdefault("tls_v1", True)
        ftype, data = self.identify_raw(**fields)
        assert ftype == FRAME_RESPONSE, data
        reply = self.identify_reply = json.loads(data)
        if reply["tls_v1"]:
            assert tls is not None, "server granted TLS that was not asked for"
            assert not self.buf, "server sent data before the TLS handshake"
            self.sock = tls.wrap_socket(self.sock, server_hostname="127.0.0.1", do_handshake_on_connect=False)
            self.sock.do_handshake()
            self.expect(FRAME_RESPONSE, b"OK")
        if reply["snappy"]:
            self.start_snappy()
            self.expect(FRAME_RESPONSE, b"OK")
        if reply["deflate"]:
            self.start_deflate(reply["deflate_level"])
            self.expect(FRAME_RESPONSE, b"OK")
        return reply

    def _restart_decoding(self, decode: Callable[[bytes], bytes]) -> None:
        early, self.buf = self.buf, b""
        self._decode = decode
        if early:
            self.buf = decode(early)

    def start_snappy(self) -> None:
        compressor, decompressor = snappy.StreamCompressor(), snappy.StreamDecompressor()
        self._encode = compressor.add_chunk
        self._restart_decoding(decompressor.decompress)

    def start_deflate(self, level: int) -> None:
        compressor, decompressor = zlib.compressobj(level, zlib.DEFLATED, -15), zlib.decompressobj(-15)
        self._encode = lambda data: compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
        self._restart_decoding(decompressor.decompress)

    # ---- commands ---------------------------------------------------------------------------------

    def auth(self, secret: str | bytes) -> tuple[int, bytes]:
        self.send("AUTH", secret.encode() if isinstance(secret, str) else secret)
        return self.frame()

    def pub(self, topic: str, body: bytes) -> tuple[int, bytes]:
        self.send(f"PUB {topic}", body)
        return self.frame()

    def mpub(self, topic: str, bodies: list[bytes]) -> tuple[int, bytes]:
        self.send(f"MPUB {topic}", mpub_body(bodies))
        return self.frame()

    def sub(self, topic: str, channel: str) -> tuple[int, bytes]:
        self.send(f"SUB {topic} {channel}")
        return self.frame()

    def consume(self, n: int, rdy: int = 100) -> list[bytes]:
        """RDY, then read and FIN ``n`` messages; returns their bodies in order of arrival."""
        self.send(f"RDY {rdy}")
        bodies = []
        while len(bodies) < n:
            msg = self.message()
            bodies.append(msg.body)
            self.send(b"FIN " + msg.id)
        return bodies


# ---- the auth server ----------------------------------------------------------------------------------


@dataclass
class AuthRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    raw_query: str
    body: Any  # parsed JSON for POST, else None
    headers: dict[str, str]

    @property
    def params(self) -> dict[str, str]:
        """The single-valued parameters nsqd sent, from the query (GET) or the JSON body (POST)."""
        source = self.body if self.method == "POST" else self.query
        return {key: values[0] for key, values in source.items()}


def grant(topic: str = ".*", channels: tuple[str, ...] = (".*",), permissions: tuple[str, ...] = ("publish",
          "subscribe"), ttl: int = 3600, identity: str = "alice", identity_url: str = "https://id.example/alice",
          extra: tuple[dict, ...] = ()) -> dict:
    return {"ttl": ttl, "identity": identity, "identity_url": identity_url,
            "authorizations": [{"topic": topic, "channels": list(channels), "permissions": list(permissions)},
                               *extra]}


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # the default listen backlog of 5 drops SYNs when many clients AUTH at once
    daemon_threads = True


@dataclass
class AuthServer:
    """An NSQ auth server on 127.0.0.1 in a thread. ``responder(request)`` returns ``(status, body)`` (body: JSON
    value or raw bytes), ``("sleep", s, status, body)`` to answer after ``s`` seconds, or ``("drip", s, status,
    body)`` to send the headers at once and the body in 8 pieces ``s`` seconds apart."""

    responder: Callable[[AuthRequest], tuple] = field(default=lambda req: (200, grant()))
    requests: list[AuthRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
                req = AuthRequest(self.command, parsed.path, query, parsed.query, body, dict(self.headers))
                owner.requests.append(req)
                answer = owner.responder(req)
                delay = drip = 0.0
                if answer[0] == "sleep":  # ("sleep", seconds, status, body): answer late
                    delay, answer = answer[1], answer[2:]
                elif answer[0] == "drip":  # ("drip", seconds, status, body): headers now, body byte by byte
                    drip, answer = answer[1], answer[2:]
                time.sleep(delay)
                status, payload = answer
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if not drip:
                        self.wfile.write(data)
                        return
                    self.wfile.flush()
                    pieces = 8
                    step = -(-len(data) // pieces)
                    for i in range(0, len(data), step):
                        time.sleep(drip)
                        self.wfile.write(data[i:i + step])
                        self.wfile.flush()
                except OSError:
                    pass  # nsqd gave up on us (request timeout)

            do_GET = do_POST = _handle

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="auth-server", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def requests_for(server: AuthServer, secret: str) -> list[AuthRequest]:
    """What ``server`` was asked about ``secret`` so far."""
    return [r for r in list(server.requests) if r.params.get("secret") == secret]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def dead_port() -> int:
    """A loopback port with nothing listening (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
