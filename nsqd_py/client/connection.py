"""One protocol V2 connection to nsqd over a plain blocking socket (TLS, snappy and deflate optional).

Threading: one thread reads (`read_frame` and the request/response helpers), any number of threads may send
(`rdy`, `fin`, `req`, `touch`, `nop`, `cls`); sends are serialised by a lock. With TLS the lock also covers the
socket reads, because an OpenSSL connection must not be read and written at the same time.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import ssl
import struct
import sys
import threading
import time
from typing import Any

from ..runtime.version import NSQ_VERSION, PY_VERSION
from ..wire.compression import CodecError, DeflateDecoder, DeflateEncoder, SnappyDecoder, snappy_encode
from .errors import NSQConnectionError, ProtocolError, ServerError
from .protocol import (
    FRAME_ERROR,
    FRAME_MESSAGE,
    FRAME_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    MESSAGE_HEAD,
    MESSAGE_HEADER,
    OK,
    Message,
    Response,
    command,
    mpub_body,
)

DEFAULT_USER_AGENT = f"nsqd_py.client/{PY_VERSION} (nsq {NSQ_VERSION})"
#: a frame larger than this is not something nsqd would send (max-msg-size is at most a few MiB in practice)
_MAX_FRAME = 256 * 1024 * 1024
_RECV_SIZE = 65536
#: a frame's size and type
_FRAME_HEAD = struct.Struct(">ii")

Frame = Message | Response | ServerError


def split_address(address: str) -> tuple[str, int] | str:
    """`host:port` or `[v6]:port` to (host, port); anything without a port is a unix socket path."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return address
    return host.strip("[]") or "127.0.0.1", int(port)


class Connection:
    """A connection to one nsqd; `connect()` dials and sends the magic, `identify()` negotiates features."""

    def __init__(
        self,
        address: str,
        *,
        timeout: float = 5.0,
        tls_context: ssl.SSLContext | None = None,
        tls_server_hostname: str | None = None,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.user_agent = user_agent
        self.negotiated: dict[str, Any] = {}
        self._tls_context = tls_context
        self._tls_server_hostname = tls_server_hostname
        self._sock: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._send_lock = threading.Lock()
        self._buf = bytearray()
        self._pos = 0
        self._encode: Any = None
        self._decoder: SnappyDecoder | DeflateDecoder | None = None
        self._tls = False
        self.closed = False

    def __repr__(self) -> str:
        return f"<Connection {self.address}>"

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- set-up ------------------------------------------------------------------------------------------------

    def connect(self) -> Connection:
        """Dial and send the `  V2` magic; NSQConnectionError if nsqd cannot be reached."""
        target = split_address(self.address)
        sock = None
        try:
            if isinstance(target, str):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                sock.connect(target)
            else:
                sock = socket.create_connection(target, timeout=self.timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(MAGIC_V2)
        except OSError as err:
            if sock is not None:
                sock.close()
            raise NSQConnectionError(f"failed to connect to {self.address} - {err}") from err
        self._sock = sock
        self.closed = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ)
        return self

    def identify(self, **fields: Any) -> dict[str, Any]:
        """IDENTIFY with `feature_negotiation` plus ``fields``; performs the TLS/snappy/deflate upgrades that
        nsqd grants and returns its JSON reply (`{}` if it answered a plain `OK`)."""
        hostname = socket.gethostname()
        body = {
            "client_id": hostname.split(".")[0],
            "hostname": hostname,
            "user_agent": self.user_agent,
            "feature_negotiation": True,
            **fields,
        }
        data = self.request(command("IDENTIFY", body=json.dumps(body).encode()))
        self.negotiated = {} if data == OK else json.loads(data)
        if self.negotiated.get("tls_v1"):
            self._upgrade_tls()
            self._expect_ok("TLS")
        if self.negotiated.get("snappy"):
            self._upgrade(snappy_encode, SnappyDecoder())
            self._expect_ok("snappy")
        if self.negotiated.get("deflate"):
            encoder = DeflateEncoder(int(self.negotiated.get("deflate_level", 6)))
            self._upgrade(encoder.encode, DeflateDecoder())
            self._expect_ok("deflate")
        return self.negotiated

    def auth(self, secret: str | bytes) -> dict[str, Any]:
        """AUTH; returns nsqd's `{"identity", "identity_url", "permission_count"}`."""
        raw = secret.encode() if isinstance(secret, str) else secret
        return json.loads(self.request(command("AUTH", body=raw)))

    def _upgrade_tls(self) -> None:
        if self._pos < len(self._buf):
            raise ProtocolError("unexpected data before the TLS handshake")
        context = self._tls_context or ssl.create_default_context()
        target = split_address(self.address)
        hostname = self._tls_server_hostname or (target[0] if isinstance(target, tuple) else None)
        try:
            self._sock = context.wrap_socket(self._require_sock(), server_hostname=hostname)
        except (OSError, ssl.SSLError) as err:
            self.close()
            raise NSQConnectionError(f"TLS handshake with {self.address} failed - {err}") from err
        self._tls = True

    def _upgrade(self, encode: Any, decoder: SnappyDecoder | DeflateDecoder) -> None:
        """Switch both directions to a compressed stream; bytes already read belong to the new stream."""
        leftover = bytes(self._buf[self._pos :])
        self._buf.clear()
        self._pos = 0
        self._encode, self._decoder = encode, decoder
        if leftover:
            self._feed(leftover)

    def _expect_ok(self, what: str) -> None:
        data = self._read_response(self.timeout)
        if data != OK:
            raise ProtocolError(f"expected OK after the {what} upgrade, got {data!r}")

    # -- commands ----------------------------------------------------------------------------------------------

    def sub(self, topic: str, channel: str) -> None:
        self.request(command("SUB", topic, channel))

    def pub(self, topic: str, body: bytes) -> None:
        self.request(command("PUB", topic, body=body))

    def mpub(self, topic: str, bodies: list[bytes]) -> None:
        self.request(command("MPUB", topic, body=mpub_body(bodies)))

    def dpub(self, topic: str, delay_ms: int, body: bytes) -> None:
        self.request(command("DPUB", topic, str(int(delay_ms)), body=body))

    def rdy(self, count: int) -> None:
        self.send(command("RDY", str(int(count))))

    def fin(self, message_id: bytes) -> None:
        self.send(command("FIN", message_id))

    def req(self, message_id: bytes, delay_ms: int = 0) -> None:
        self.send(command("REQ", message_id, str(int(delay_ms))))

    def touch(self, message_id: bytes) -> None:
        self.send(command("TOUCH", message_id))

    def nop(self) -> None:
        self.send(command("NOP"))

    def cls(self) -> None:
        """Ask nsqd to stop sending; it answers `CLOSE_WAIT` (seen as a Response by `read_frame`)."""
        self.send(command("CLS"))

    def request(self, raw: bytes, timeout: float | None = None) -> bytes:
        """Send one command and return its response payload; ServerError on an error frame.
        Only for connections that are not subscribed (a message where a reply is due is a ProtocolError)."""
        self.send(raw)
        return self._read_response(self.timeout if timeout is None else timeout)

    def send(self, raw: bytes) -> None:
        """Write raw command bytes (compressed if negotiated); NSQConnectionError if the socket is gone."""
        with self._send_lock:
            sock = self._require_sock()
            try:
                sock.sendall(self._encode(raw) if self._encode else raw)
            except OSError as err:
                self.close()
                raise NSQConnectionError(f"write to {self.address} failed - {err}") from err

    # -- reading -----------------------------------------------------------------------------------------------

    def read_frame(self, timeout: float | None = None) -> Frame | None:
        """The next frame, or None when ``timeout`` seconds pass first (None waits forever, 0 only takes what
        has arrived). Heartbeats are answered with NOP and never returned. Error frames are returned, not
        raised (a consumer logs E_FIN_FAILED and carries on); a closed socket raises NSQConnectionError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        frames: list[Frame] = []
        while not frames:
            if not self._take_frames(frames, 1) and not self._fill(deadline):
                return None
        return frames[0]

    def read_frames(self) -> list[Frame]:
        """Every frame that has arrived, without waiting: the buffered ones, or else what one read of the socket
        brings ([] when nothing has). As `read_frame(0)`, but a subscriber's read loop parses a whole socket read
        per call."""
        frames: list[Frame] = []
        while not frames:
            if not self._take_frames(frames, sys.maxsize) and not self._fill(time.monotonic()):
                break
        return frames

    def has_buffered(self) -> bool:
        """A complete frame (or TLS data) is waiting, so `read_frame(0)` returns without touching the socket."""
        if len(self._buf) - self._pos >= 8:
            size = int.from_bytes(self._buf[self._pos : self._pos + 4], "big")
            if len(self._buf) - self._pos >= 4 + size:
                return True
        if isinstance(self._decoder, DeflateDecoder) and self._decoder.has_pending:
            return True
        return isinstance(self._sock, ssl.SSLSocket) and self._sock.pending() > 0

    def fileno(self) -> int:
        return self._require_sock().fileno()

    def _read_response(self, timeout: float | None) -> bytes:
        frame = self.read_frame(timeout)
        if frame is None:
            self.close()
            raise NSQConnectionError(f"timed out waiting for a response from {self.address}")
        if isinstance(frame, ServerError):
            if frame.fatal:
                self.close()
            raise frame
        if isinstance(frame, Message):
            raise ProtocolError("received a message while waiting for a response (connection is subscribed)")
        return frame.data

    def _take_frames(self, frames: list[Frame], limit: int) -> bool:
        """Move up to ``limit`` complete frames from the buffer into ``frames`` (answering heartbeats); False if
        the buffer held no complete frame."""
        buf, pos = self._buf, self._pos
        start, available = pos, len(buf)
        while len(frames) < limit and available - pos >= 8:
            size, ftype = _FRAME_HEAD.unpack_from(buf, pos)
            if size < 4 or size > _MAX_FRAME:
                self.close()
                raise ProtocolError(f"invalid frame size {size} from {self.address}")
            end = pos + 4 + size
            if end > available:
                break
            if ftype == FRAME_MESSAGE and size >= 4 + MESSAGE_HEADER:  # the hot path, decoded in place
                timestamp, attempts = MESSAGE_HEAD.unpack_from(buf, pos + 8)
                frames.append(Message(bytes(buf[pos + 18 : pos + 34]), bytes(buf[pos + 34 : end]), timestamp,
                                      attempts, self))
            else:
                frame = self._decode(ftype, bytes(buf[pos + 8 : end]))
                if frame is not None:
                    frames.append(frame)
            pos = end
        if pos == available:
            buf.clear()
            self._pos = 0
        else:
            self._pos = pos
        return pos != start

    def _decode(self, ftype: int, data: bytes) -> Frame | None:
        """One frame's payload; None for a heartbeat (answered here)."""
        if ftype == FRAME_RESPONSE:
            if data == HEARTBEAT:
                self.nop()
                return None
            return Response(data)
        if ftype == FRAME_MESSAGE:
            return Message.decode(data, self)
        if ftype == FRAME_ERROR:
            return ServerError(data.decode("utf-8", "replace"))
        raise ProtocolError(f"unknown frame type {ftype} from {self.address}")

    def _fill(self, deadline: float | None) -> bool:
        """Read one chunk into the buffer; False if the deadline passed with nothing to read."""
        if isinstance(self._decoder, DeflateDecoder) and self._decoder.has_pending:
            self._feed(b"")
            return True
        sock = self._require_sock()
        if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            assert self._selector is not None
            if not self._selector.select(remaining):
                return False
        try:
            if self._tls:
                with self._send_lock:
                    chunk = sock.recv(_RECV_SIZE)
            else:
                chunk = sock.recv(_RECV_SIZE)
        except ssl.SSLWantReadError:
            return True
        except OSError as err:
            self.close()
            raise NSQConnectionError(f"read from {self.address} failed - {err}") from err
        if not chunk:
            self.close()
            raise NSQConnectionError(f"connection to {self.address} closed by nsqd")
        self._feed(chunk)
        return True

    def _feed(self, chunk: bytes) -> None:
        if self._pos > _RECV_SIZE:
            del self._buf[: self._pos]
            self._pos = 0
        if self._decoder is None:
            self._buf += chunk
            return
        try:
            self._buf += self._decoder.decode(chunk)
        except CodecError as err:
            self.close()
            raise ProtocolError(f"corrupt compressed stream from {self.address} - {err}") from err

    def _require_sock(self) -> socket.socket:
        if self._sock is None:
            raise NSQConnectionError(f"not connected to {self.address}")
        return self._sock

    def close(self) -> None:
        """Close the socket (idempotent)."""
        self.closed = True
        sock, self._sock = self._sock, None
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
