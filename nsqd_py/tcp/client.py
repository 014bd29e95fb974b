"""ClientV2: one protocol V2 connection's state, its buffered reader and its output buffer.

Message frames are appended to the output buffer by whichever greenlet dispatches them (often a
publisher's); only this client's writer greenlet writes them to the socket, so a slow consumer
never blocks anyone else. Responses are written by the connection's own greenlet at once.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import gevent
from gevent.event import Event
from gevent.lock import Semaphore

from ..core.consumer import STATE_CLOSING, Consumer
from ..daemon.tlsconfig import cipher_suite_name, version_name
from ..runtime.fairness import BusyGuard
from ..runtime.listen import send_all
from ..wire.compression import CodecError, DeflateDecoder, DeflateEncoder, SnappyDecoder, snappy_encode

if TYPE_CHECKING:
    from ..cluster.auth import AuthState
    from ..core.channel import Channel
    from ..core.message import Message
    from ..core.nsqd import NSQD

FRAME_TYPE_RESPONSE = 0
FRAME_TYPE_ERROR = 1
_FRAME_HEADER = struct.Struct(">ii")
#: nsqd's bufio reader size: a command line longer than this closes the connection
MAX_LINE_LENGTH = 16 * 1024
_RECV_SIZE = 65536
HEARTBEAT_PAYLOAD = b"_heartbeat_"
#: no socket timeout set yet (None means "no timeout")
_UNSET_TIMEOUT = -1.0


class ConnectionLost(Exception):
    """The peer closed the connection or a socket operation failed; the text is the reason."""


def frame(frame_type: int, data: bytes) -> bytes:
    return _FRAME_HEADER.pack(len(data) + 4, frame_type) + data


class ClientV2(Consumer):
    __slots__ = (
        "_busy",
        "_first_pending",
        "_flush_now",
        "_out",
        "_out_size",
        "_rbuf",
        "_read_timeout",
        "_recv",
        "_rpos",
        "_send",
        "_wake",
        "_write_lock",
        "_writer",
        "auth_identity",
        "auth_identity_url",
        "auth_secret",
        "auth_state",
        "authed",
        "channel",
        "client_id",
        "closed",
        "connect_ts",
        "deflate",
        "deflate_level",
        "heartbeat_interval",
        "hostname",
        "id",
        "nsqd",
        "output_buffer_size",
        "output_buffer_timeout",
        "pub_counts",
        "remote_address",
        "snappy",
        "sock",
        "tls",
        "tls_cipher_suite",
        "tls_common_name",
        "tls_negotiated_protocol",
        "tls_negotiated_protocol_is_mutual",
        "tls_version",
        "topology_region",
        "topology_zone",
        "user_agent",
    )

    def __init__(self, nsqd: NSQD, sock: socket.socket, remote_address: str) -> None:
        super().__init__()
        opts = nsqd.opts
        self.nsqd = nsqd
        self.id = nsqd.new_client_id()
        self.sock = sock
        self.remote_address = remote_address
        host = remote_address.rsplit(":", 1)[0] if ":" in remote_address else remote_address
        self.client_id = host
        self.hostname = host
        self.user_agent = ""
        self.connect_ts = int(time.time())
        self.channel: Channel | None = None
        self.pub_counts: dict[str, int] = {}
        self.msg_timeout = opts.msg_timeout / 1e9
        #: seconds; 0 = heartbeats (and read/write deadlines) off. nsqd's default: client timeout / 2.
        self.heartbeat_interval = opts.client_timeout / 2e9
        self.output_buffer_size = 16 * 1024
        self.output_buffer_timeout = opts.output_buffer_timeout / 1e9
        self.deflate = False
        self.deflate_level = 0
        self.snappy = False
        self.tls = False
        self.tls_version = ""
        self.tls_cipher_suite = ""
        self.tls_common_name = ""
        self.tls_negotiated_protocol = ""
        self.tls_negotiated_protocol_is_mutual = False
        self.authed = False
        self.auth_identity = ""
        self.auth_identity_url = ""
        self.auth_secret = b""
        self.auth_state: AuthState | None = None
        self.topology_zone = ""
        self.topology_region = ""
        self._rbuf = bytearray()
        self._rpos = 0
        self._busy = BusyGuard()
        self._read_timeout: float | None = _UNSET_TIMEOUT
        self._recv: Callable[[int], bytes] = sock.recv
        self._send: Callable[[bytes], None] = partial(send_all, sock)
        self._out: list[bytes] = []
        self._out_size = 0
        self._first_pending = 0.0
        self._flush_now = False
        self._wake = Event()
        self._write_lock = Semaphore()
        #: the connection is closing or closed (server side or by the peer)
        self.closed = False
        self._writer: gevent.Greenlet | None = None

    def __str__(self) -> str:
        return self.remote_address

    # ---- reading ------------------------------------------------------------------------------

    def set_read_deadline(self) -> None:
        """nsqd drops a client that sends nothing for two heartbeat intervals. gevent applies a socket's
        timeout to every wait, so it is set only when the interval or the socket changed (settimeout is
        about a tenth of the server's work per FIN otherwise)."""
        timeout = 2 * self.heartbeat_interval if self.heartbeat_interval > 0 else None
        if timeout != self._read_timeout:
            self.sock.settimeout(timeout)
            self._read_timeout = timeout

    def _fill(self) -> None:
        self._busy.check()
        try:
            data = self._recv(_RECV_SIZE)
        except TimeoutError:
            raise ConnectionLost("i/o timeout") from None
        except OSError as err:
            raise ConnectionLost(str(err)) from None
        if not data:
            raise EOFError
        if self._rpos:
            del self._rbuf[: self._rpos]
            self._rpos = 0
        self._rbuf += data

    def read_line(self) -> bytes:
        """One command line without its `\\n` (and a trailing `\\r`); EOFError at a clean end."""
        while True:
            idx = self._rbuf.find(b"\n", self._rpos)
            if idx >= MAX_LINE_LENGTH + self._rpos:  # Go's 16 KiB bufio buffer cannot hold the line
                raise ConnectionLost("bufio: buffer full")
            if idx >= 0:
                line = bytes(self._rbuf[self._rpos : idx])
                self._rpos = idx + 1
                return line[:-1] if line.endswith(b"\r") else line
            if len(self._rbuf) - self._rpos >= MAX_LINE_LENGTH:
                raise ConnectionLost("bufio: buffer full")
            self._fill()

    def has_buffered_line(self) -> bool:
        return self._rbuf.find(b"\n", self._rpos) >= 0

    def read_exactly(self, n: int) -> bytes:
        while len(self._rbuf) - self._rpos < n:
            self._fill()
        start = self._rpos
        self._rpos = start + n
        return bytes(self._rbuf[start : start + n])

    def read_int32(self) -> int:
        while len(self._rbuf) - self._rpos < 4:
            self._fill()
        (value,) = struct.unpack_from(">i", self._rbuf, self._rpos)
        self._rpos += 4
        return value

    def buffered(self) -> tuple[bytearray, int]:
        """The read buffer and the parse position, for parsers that walk a large body in place
        (MPUB); they report how far they got with :meth:`seek`."""
        return self._rbuf, self._rpos

    def seek(self, pos: int) -> None:
        self._rpos = pos

    def take_buffered(self) -> bytes:
        """Bytes read from the socket but not parsed yet (needed when the transport is upgraded)."""
        rest = bytes(self._rbuf[self._rpos :])
        self._rbuf = bytearray()
        self._rpos = 0
        return rest

    # ---- writing ------------------------------------------------------------------------------

    def start_writer(self) -> None:
        self._writer = gevent.spawn(self._writer_loop)

    def send_response(self, data: bytes, frame_type: int = FRAME_TYPE_RESPONSE) -> None:
        """Write a response or error frame now, after any buffered message frames."""
        self._out.append(frame(frame_type, data))
        self._out_size += 1
        self.flush()

    def send_message(self, msg: Message) -> None:
        data = msg.frame()
        was_empty = not self._out
        self._out.append(data)
        self._out_size += len(data)
        if self._out_size >= self.output_buffer_size or self.output_buffer_timeout <= 0 or not self.is_ready():
            self._flush_now = True
            self._wake.set()
        elif was_empty:
            self._first_pending = time.monotonic()
            self._wake.set()

    def flush(self) -> None:
        """Write everything buffered, in this greenlet; ConnectionLost when the socket fails."""
        with self._write_lock:
            if not self._out:
                return
            data = b"".join(self._out)
            self._out.clear()
            self._out_size = 0
            self._flush_now = False
            timeout = self.heartbeat_interval if self.heartbeat_interval > 0 else None
            try:
                with gevent.Timeout(timeout, ConnectionLost("i/o timeout")):
                    self._send(data)
            except OSError as err:
                raise ConnectionLost(str(err)) from None

    def _writer_loop(self) -> None:
        """Flush message frames when due and send heartbeats, until the connection closes."""
        interval = self.heartbeat_interval
        next_heartbeat = time.monotonic() + interval
        try:
            while not self.closed:
                now = time.monotonic()
                if interval != self.heartbeat_interval:  # IDENTIFY changed it: restart the ticker
                    interval = self.heartbeat_interval
                    next_heartbeat = now + interval
                if self._flush_now:
                    self.flush()
                    continue
                if self.heartbeat_interval > 0 and now >= next_heartbeat:
                    self.send_response(HEARTBEAT_PAYLOAD)
                    next_heartbeat = now + self.heartbeat_interval
                    continue
                wait = next_heartbeat - now if self.heartbeat_interval > 0 else None
                if self._out:
                    due = self._first_pending + self.output_buffer_timeout - now
                    if due <= 0:
                        self.flush()
                        continue
                    wait = due if wait is None else min(wait, due)
                self._wake.clear()
                self._wake.wait(wait)
        except ConnectionLost as err:
            if not self.closed:
                self.nsqd.logger.error(f"PROTOCOL(V2): [{self}] messagePump error - {err}")
                self.close()
        except gevent.GreenletExit:
            pass

    def reset_heartbeat(self) -> None:
        """Wake the writer so a changed heartbeat interval takes effect."""
        self._wake.set()

    # ---- transport upgrades (IDENTIFY) ---------------------------------------------------------

    def upgrade_tls(self, context: ssl.SSLContext) -> None:
        """Server-side TLS handshake on the raw socket (5 s deadline, like nsqd). The handshake runs
        on a duplicate of the socket, so after a failure the plain one still carries the error frame."""
        with self._write_lock:
            tls_sock = context.wrap_socket(self.sock.dup(), server_side=True, do_handshake_on_connect=False)
            tls_sock.settimeout(5)
            try:
                tls_sock.do_handshake()
            except (OSError, ValueError) as err:
                tls_sock.close()
                raise ConnectionLost(str(err)) from None
            self.sock.close()
            self.sock = tls_sock
            self._read_timeout = _UNSET_TIMEOUT
            self._recv = tls_sock.recv
            self._send = partial(send_all, tls_sock)
            self.tls = True
            self.tls_version = version_name(tls_sock)
            self.tls_cipher_suite = cipher_suite_name(tls_sock)
            self.tls_negotiated_protocol = tls_sock.selected_alpn_protocol() or ""
            self.tls_negotiated_protocol_is_mutual = True  # what Go's crypto/tls always reports
            cert = tls_sock.getpeercert()
            self.tls_common_name = _common_name(cert) if cert else ""

    def upgrade_snappy(self) -> None:
        decoder = SnappyDecoder()
        raw_send = self._send
        with self._write_lock:
            self._recv = self._decoding_recv(decoder.decode, lambda: False, lambda: False)
            self._send = lambda data: raw_send(snappy_encode(data))
            self.snappy = True

    def upgrade_deflate(self, level: int) -> None:
        decoder = DeflateDecoder()
        encoder = DeflateEncoder(level)
        raw_send = self._send
        with self._write_lock:
            self._recv = self._decoding_recv(decoder.decode, lambda: decoder.has_pending, lambda: decoder.ended)
            self._send = lambda data: raw_send(encoder.encode(data))
            self.deflate = True
            self.deflate_level = level

    def _decoding_recv(self, decode: Callable[[bytes], bytes], pending: Callable[[], bool],
                       ended: Callable[[], bool]) -> Callable[[int], bytes]:
        """A recv that returns decompressed bytes: b"" at the end of the stream. Bytes the client pipelined
        before the upgrade went through are decoded first. Like Go's readers, a corrupt stream yields what
        decoded before the corruption, then ends, so a command it cuts short is answered as one cut short by
        EOF (E_BAD_MESSAGE ...); the end of a deflate stream's final block ends it too."""
        raw_recv = self._recv
        early = [self.take_buffered()]
        broken = [False]

        def recv(size: int) -> bytes:
            while True:
                if broken[0] or ended():
                    return b""
                if early:
                    data = early.pop()
                elif pending():
                    data = b""
                else:
                    data = raw_recv(size)
                    if not data:
                        return b""
                try:
                    out = decode(data)
                except CodecError as err:
                    broken[0] = True
                    out = err.partial
                if out:
                    return out

        return recv

    # ---- state changes -------------------------------------------------------------------------

    def set_ready_count(self, count: int) -> None:
        self.ready_count = count
        if self.is_ready():
            if self.channel is not None:
                self.channel.dispatch()
        elif self._out:
            self._flush_now = True
            self._wake.set()

    def start_close(self) -> None:
        """CLS: stop receiving; the client closes the socket once its in-flight messages settle."""
        self.ready_count = 0
        self.state = STATE_CLOSING
        if self._out:
            self._flush_now = True
            self._wake.set()

    def set_auth_state(self, state: AuthState) -> None:
        """What the auth server said, also after a re-query; `authed` means it granted something."""
        self.auth_state = state
        self.authed = bool(state.authorizations)
        self.auth_identity = state.identity
        self.auth_identity_url = state.identity_url

    def published(self, topic: str, count: int) -> None:
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count

    def close(self) -> None:
        """Drop the connection (server side): the reader greenlet sees EOF and cleans up."""
        if self.closed:
            return
        self.closed = True
        self._wake.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def finish_connection(self) -> None:
        """The connection's greenlet is ending: leave the channel, stop the writer."""
        self.closed = True
        if self.channel is not None:
            self.channel.remove_client(self)
        if self._writer is not None:
            self._writer.kill(block=False)
        self.nsqd.remove_client(self.id)
        with contextlib.suppress(OSError):
            self.sock.close()


def _common_name(cert: dict) -> str:
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return ""
