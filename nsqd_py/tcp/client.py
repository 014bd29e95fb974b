"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

ClientV2: one protocol V2 connection's state, its buffered reader and its output buffer.

Frames are appended to the output buffer by whichever greenlet produces them (a message often by a publisher's):
nothing writes to the socket there. Responses, and messages that are due (the buffer is full, output buffering
is off, or the client has no RDY left), leave at the end of the loop turn through the outbox, in one send per
connection; other messages wait for the output buffer timeout (one timer). Heartbeats come from a repeating
timer and the read deadline is one timer re-armed lazily, so a connection has no greenlet besides its reader.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import gevent

from ..config.tlsconfig import cipher_suite_name, version_name
from ..core.consumer import STATE_CLOSING
from ..core.message import int32_at
from ..runtime.fairness import BusyGuard
from ..runtime.outbox import Outbox
from ..runtime.transport import PlainTransport, TLSTransport, Transport
from ..wire.compression import CodecError, DeflateDecoder, DeflateEncoder, SnappyDecoder, snappy_encode
from .client_state import ClientState

if TYPE_CHECKING:
    from ..cluster.auth import AuthState
    from ..config.options import Options
    from ..core.message import Message
    from ..runtime.log import Logger

FRAME_TYPE_RESPONSE: Final = 0
FRAME_TYPE_ERROR: Final = 1
_FRAME_HEADER: Final = struct.Struct(">ii")
#: nsqd's bufio reader size: a command line longer than this closes the connection
MAX_LINE_LENGTH: Final = 16 * 1024
_RECV_SIZE: Final = 65536
#: `FIN `, a message id and the line's end
_FIN_LINE: Final = 4 + 16 + 1
#: `PUB `, the longest valid topic name (64) and its line feed: where a `PUB` line's end is looked for
_PUB_LINE_MAX: Final = 4 + 64 + 1
#: the bytes of `FIN `, the line feed and the carriage return, as indexing bytes gives them (`in` with an int
#: needle searches bytes at once; a bytes needle is tried as an int first, which raises)
_F: Final = 0x46
_I: Final = 0x49
_N: Final = 0x4E
_P: Final = 0x50
_U: Final = 0x55
_B: Final = 0x42
_SPACE: Final = 0x20
_LF: Final = 0x0A
_CR: Final = 0x0D
HEARTBEAT_PAYLOAD: Final = b"_heartbeat_"
#: how often a read deadline that passed outside a read looks again for the next read
_DEADLINE_RECHECK: Final = 0.05
#: how long the last answers of a closing connection may take without heartbeats (then it is the write deadline)
_FINAL_SEND_SECONDS: Final = 1.0


class ConnectionLost(Exception):
    """The peer closed the connection or a socket operation failed; the text is the reason."""


def frame(frame_type: int, data: bytes) -> bytes:
    return _FRAME_HEADER.pack(len(data) + 4, frame_type) + data


#: the answer to most commands, framed once
_OK: Final = b"OK"
_OK_FRAME: Final = frame(FRAME_TYPE_RESPONSE, _OK)


def _identity(data: bytes) -> bytes:
    return data


class ClientV2(ClientState):
    __slots__ = (
        "_buffer_timer",
        "_busy",
        "_deadline_fires_at",
        "_deadline_timer",
        "_encode",
        "_heartbeat_timer",
        "_in_outbox",
        "_loop",
        "_out",
        "_out_size",
        "_outbox",
        "_rbuf",
        "_read_deadline",
        "_reader",
        "_reading",
        "_recv",
        "_rpos",
        "_transport",
        "auth_secret",
        "auth_state",
        "closed",
        "deflate_level",
        "heartbeat_interval",
        "logger",
        "output_buffer_size",
        "output_buffer_timeout",
        "tls_common_name",
    )

    def __init__(self, opts: Options, logger: Logger, client_id: int, sock: socket.socket, remote_address: str,
                 outbox: Outbox) -> None:
        super().__init__(client_id, remote_address, opts.msg_timeout / 1e9)
        self.logger = logger
        #: seconds; 0 = heartbeats (and read/write deadlines) off. nsqd's default: client timeout / 2.
        self.heartbeat_interval = opts.client_timeout / 2e9
        self.output_buffer_size = 16 * 1024
        self.output_buffer_timeout = opts.output_buffer_timeout / 1e9
        self.deflate_level = 0
        self.tls_common_name = ""
        self.auth_secret = b""
        self.auth_state: AuthState | None = None
        self._rbuf = b""
        self._rpos = 0
        self._busy = BusyGuard()
        self._transport: Transport = PlainTransport(sock, self._send_failed)
        self._recv: Callable[[int], bytes] = self._transport.recv
        self._encode: Callable[[bytes], bytes] = _identity
        self._loop: Any = gevent.get_hub().loop
        self._outbox = outbox
        self._in_outbox = False
        self._out: list[bytes] = []
        self._out_size = 0
        self._buffer_timer: Any = None
        self._heartbeat_timer: Any = None
        self._deadline_timer: Any = None
        self._read_deadline = 0.0
        self._deadline_fires_at = 0.0
        self._reader: Any = None
        self._reading = False
        #: the connection is closing or closed (server side or by the peer)
        self.closed = False

    def __str__(self) -> str:
        return self.remote_address

    def start(self) -> None:
        """Called by the connection's reader greenlet before its first read: heartbeats begin."""
        self._reader = gevent.getcurrent()
        self.reset_heartbeat()

    # ---- reading ------------------------------------------------------------------------------

    def set_read_deadline(self) -> None:
        """nsqd drops a client that sends nothing for two heartbeat intervals: the deadline of the command about
        to be read. One timer per connection watches it, re-armed only when it fires before the deadline."""
        if self.heartbeat_interval <= 0:
            return
        timeout = 2 * self.heartbeat_interval
        now = time.monotonic()
        self._read_deadline = deadline = now + timeout
        if self._deadline_timer is None:
            self._arm_deadline(timeout)
        elif deadline < self._deadline_fires_at:  # the interval shrank (IDENTIFY): an earlier timer
            self._deadline_timer.close()
            self._arm_deadline(timeout)

    def _arm_deadline(self, after: float) -> None:
        timer = self._loop.timer(after)
        self._deadline_timer = timer
        self._deadline_fires_at = time.monotonic() + after
        timer.start(self._deadline_reached)

    def _deadline_reached(self) -> None:
        self._deadline_timer.close()
        self._deadline_timer = None
        if self.closed or self.heartbeat_interval <= 0:
            return
        left = self._read_deadline - time.monotonic()
        if left > 0:
            self._arm_deadline(left)
        elif self._reading:
            self._reader.throw(ConnectionLost("i/o timeout"))
        else:  # the reader is busy elsewhere (a command still running): the deadline applies to its next read
            self._arm_deadline(_DEADLINE_RECHECK)

    def _recv_some(self) -> bytes:
        """The socket's next bytes; EOFError at a clean end."""
        self._busy.check()
        self._reading = True
        try:
            data = self._recv(_RECV_SIZE)
        except OSError as err:
            raise ConnectionLost(str(err)) from None
        finally:
            self._reading = False
        if not data:
            raise EOFError
        return data

    def _fill(self) -> None:
        """Add the socket's next bytes to what is left to parse. The buffer is immutable bytes, so that a parser's
        slices are one copy each: mostly everything read before was parsed, and the new bytes are the buffer."""
        data = self._recv_some()
        self._rbuf = self._rbuf[self._rpos :] + data if self._rpos < len(self._rbuf) else data
        self._rpos = 0

    def await_input(self) -> None:
        """Read from the socket when everything read so far was parsed (EOFError at a clean end), so that the
        parsers of whole commands in the buffer (`take_fin_ids`, `buffered_pub`) find the next one there."""
        if self._rpos >= len(self._rbuf):
            self._fill()

    def read_line(self) -> bytes:
        """One command line without its `\\n` (and a trailing `\\r`); EOFError at a clean end."""
        while True:
            idx = self._rbuf.find(b"\n", self._rpos)
            if idx >= MAX_LINE_LENGTH + self._rpos:  # Go's 16 KiB bufio buffer cannot hold the line
                raise ConnectionLost("bufio: buffer full")
            if idx >= 0:
                line = self._rbuf[self._rpos : idx]
                self._rpos = idx + 1
                return line[:-1] if line.endswith(b"\r") else line
            if len(self._rbuf) - self._rpos >= MAX_LINE_LENGTH:
                raise ConnectionLost("bufio: buffer full")
            self._fill()

    def take_fin_ids(self) -> list[bytes]:
        """The ids of the plain `FIN <16-byte id>\\n` lines at the front of the read buffer, taken from it. A
        consumer FINs a run of messages in one write: they are parsed here in one pass, not line by line. A line
        the command parser would read otherwise (a space or a line end in the id, a `\\r` before the `\\n`) stops
        the run, and is left for it."""
        ids: list[bytes] = []
        buf = self._rbuf
        at = self._rpos
        end = len(buf)
        while at + _FIN_LINE <= end:
            if buf[at] != _F or buf[at + 1] != _I or buf[at + 2] != _N or buf[at + 3] != _SPACE or \
                    buf[at + _FIN_LINE - 1] != _LF:
                break
            msg_id = buf[at + 4 : at + _FIN_LINE - 1]
            if _SPACE in msg_id or _LF in msg_id or msg_id[15] == _CR:
                break
            ids.append(msg_id)
            at += _FIN_LINE
        self._rpos = at
        return ids

    def buffered_pub(self, max_size: int) -> tuple[bytes, bytes, int] | None:
        """The topic and body of a `PUB <topic>\\n<size><body>` wholly in the read buffer at the parse position,
        and the position after it; nothing is taken (`seek` does that). Most publishers send one PUB and wait for
        its answer: such a PUB is read here in one pass, not line by line. None when the buffer holds no whole PUB
        there, or one the command parser answers otherwise: another parameter, a `\\r\\n` line end, no topic, a
        size outside 1..``max_size``."""
        buf = self._rbuf
        pos = self._rpos
        if len(buf) - pos < 10 or buf[pos] != _P or buf[pos + 1] != _U or buf[pos + 2] != _B or \
                buf[pos + 3] != _SPACE:
            return None
        # the line's end, looked for by hand (cheaper than a find call for a short name): a space or a `\\r` in
        # the name is the parser's case
        line_end = pos + 4
        limit = min(pos + _PUB_LINE_MAX, len(buf))
        while True:
            if line_end == limit:
                return None
            char = buf[line_end]
            if char == _LF:
                break
            if char in (_SPACE, _CR):
                return None
            line_end += 1
        body_at = line_end + 5
        if line_end == pos + 4 or len(buf) < body_at:
            return None
        size = int32_at(buf, line_end + 1)
        end = body_at + size
        if size <= 0 or size > max_size or len(buf) < end:
            return None
        topic = buf[pos + 4 : line_end]
        return topic, buf[body_at:end], end

    def has_buffered_line(self) -> bool:
        return self._rbuf.find(b"\n", self._rpos) >= 0

    def read_exactly(self, n: int) -> bytes:
        buf = self._rbuf
        start = self._rpos
        if len(buf) - start >= n:
            self._rpos = start + n
            return buf[start : start + n]
        # more than has arrived: read in parts and joined once (adding each read to the buffer would copy all of
        # it again every time)
        parts = [buf[start:]]
        missing = n - len(parts[0])
        while True:
            data = self._recv_some()
            if len(data) >= missing:
                parts.append(data[:missing])
                self._rbuf = data
                self._rpos = missing
                return b"".join(parts)
            parts.append(data)
            missing -= len(data)

    def read_int32(self) -> int:
        while len(self._rbuf) - self._rpos < 4:
            self._fill()
        value = int32_at(self._rbuf, self._rpos)
        self._rpos += 4
        return value

    def buffered(self) -> tuple[bytes, int]:
        """The read buffer and the parse position, for parsers that walk a large body in place
        (MPUB); they report how far they got with :meth:`seek`."""
        return self._rbuf, self._rpos

    def seek(self, pos: int) -> None:
        self._rpos = pos

    def take_buffered(self) -> bytes:
        """Bytes read from the socket but not parsed yet (needed when the transport is upgraded)."""
        rest = self._rbuf[self._rpos :]
        self._rbuf = b""
        self._rpos = 0
        return rest


    # ---- writing ------------------------------------------------------------------------------

    def send_response(self, data: bytes, frame_type: int = FRAME_TYPE_RESPONSE) -> None:
        """Queue a response or error frame, after any buffered message frames; it leaves at the end of this
        loop turn."""
        self._out.append(_OK_FRAME if data == _OK and frame_type == FRAME_TYPE_RESPONSE else frame(frame_type, data))
        self._push_soon()

    def send_message(self, msg: Message) -> None:
        self.send_message_frame(msg.frame(), not self.is_ready())

    def send_message_frame(self, data: bytes, urgent: bool) -> None:
        """Queue a message frame; it waits in the output buffer unless ``urgent`` (the client cannot take more) or
        the buffer is full."""
        self._out.append(data)
        self._out_size += len(data)
        if urgent or self._out_size >= self.output_buffer_size or self.output_buffer_timeout <= 0:
            self._push_soon()  # like nsqd's messagePump: flushed at once when the client cannot take more
        elif self._buffer_timer is None:
            self._buffer_timer = timer = self._loop.timer(self.output_buffer_timeout)
            timer.start(self.push)
        elif not self._buffer_timer.active and not self._in_outbox:
            self._buffer_timer.start(self.push)

    def _push_soon(self) -> None:
        self._transport.answered = True  # set now: the reader may be about to read before the push
        if not self._in_outbox:
            self._in_outbox = True
            self._outbox.add(self)

    def push(self) -> None:
        """Send everything buffered without blocking (the outbox and the timers call this in the hub)."""
        self._in_outbox = False
        if self._out and not self.closed:
            self._send_out()

    def _send_out(self) -> None:
        out = self._out
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self._out_size = 0
        if self._buffer_timer is not None:
            self._buffer_timer.stop()
        self._transport.send(self._encode(data))

    def drain(self) -> None:
        """Send everything buffered and wait until it is on the wire (before the transport changes, or the
        connection closes)."""
        if self._out:
            self._send_out()
        self._transport.drain()

    def _send_failed(self, err: Exception) -> None:
        if not self.closed:
            self.logger.error(f"PROTOCOL(V2): [{self}] messagePump error - {err}")
            self.close()

    def _heartbeat(self) -> None:
        self.send_response(HEARTBEAT_PAYLOAD)

    def reset_heartbeat(self) -> None:
        """(Re)start the heartbeat ticker at the current interval (IDENTIFY may have changed it); the interval
        is also the write deadline."""
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.close()
            self._heartbeat_timer = None
        interval = self.heartbeat_interval
        self._transport.write_timeout = interval
        if interval > 0 and not self.closed:
            self._heartbeat_timer = timer = self._loop.timer(interval, interval)
            timer.start(self._heartbeat)

    # ---- transport upgrades (IDENTIFY) ---------------------------------------------------------

    def upgrade_tls(self, context: ssl.SSLContext) -> None:
        """Server-side TLS handshake (5 s deadline, like nsqd), after the IDENTIFY answer went out in plain.
        The handshake runs on a duplicate of the socket, so after a failure the plain one still carries the
        error frame."""
        plain = self._transport
        if not isinstance(plain, PlainTransport):
            raise ConnectionLost("TLS is already on")
        self.drain()
        tls_sock = context.wrap_socket(plain.dup_socket(), server_side=True, do_handshake_on_connect=False)
        tls_sock.settimeout(5)
        try:
            tls_sock.do_handshake()
        except (OSError, ValueError) as err:
            tls_sock.close()
            raise ConnectionLost(str(err)) from None
        tls_sock.settimeout(None)
        plain.close()
        self._transport = TLSTransport(tls_sock, self._send_failed)
        self._transport.write_timeout = self.heartbeat_interval
        self._recv = self._transport.recv
        self.tls = True
        self.tls_version = version_name(tls_sock)
        self.tls_cipher_suite = cipher_suite_name(tls_sock)
        self.tls_negotiated_protocol = tls_sock.selected_alpn_protocol() or ""
        self.tls_negotiated_protocol_is_mutual = True  # what Go's crypto/tls always reports
        cert = tls_sock.getpeercert()
        self.tls_common_name = _common_name(cert) if cert else ""

    def upgrade_snappy(self) -> None:
        self.drain()
        decoder = SnappyDecoder()
        self._recv = self._decoding_recv(decoder.decode, lambda: False, lambda: False)
        self._encode = snappy_encode
        self.snappy = True

    def upgrade_deflate(self, level: int) -> None:
        self.drain()
        decoder = DeflateDecoder()
        self._recv = self._decoding_recv(decoder.decode, lambda: decoder.has_pending, lambda: decoder.ended,
                                         decoder.finish)
        self._encode = DeflateEncoder(level).encode
        self.deflate = True
        self.deflate_level = level

    def _decoding_recv(self, decode: Callable[[bytes], bytes], pending: Callable[[], bool],
                       ended: Callable[[], bool], finish: Callable[[], bytes] = bytes) -> Callable[[int], bytes]:
        """A recv that returns decompressed bytes: b"" at the end of the stream. Bytes the client sent after the
        IDENTIFY without waiting for its answer are dropped, as nsqd drops them: its upgrade puts a new reader on the
        socket and the old one's buffer goes with it (a client that sends compressed data before it knows the
        server agreed loses it on both). Like Go's readers, a corrupt stream yields what decoded before the
        corruption, then ends, so a command it cuts short is answered as one cut short by EOF (E_BAD_MESSAGE ...);
        the end of a deflate stream's final block ends it too, and at the input's end ``finish`` hands over what
        the decoder still held."""
        raw_recv = self._recv
        self.take_buffered()
        broken = [False]

        def recv(size: int) -> bytes:
            while True:
                if broken[0] or ended():
                    return b""
                if pending():
                    data = b""
                else:
                    data = raw_recv(size)
                    if not data:
                        broken[0] = True
                        return finish()
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
            self._push_soon()

    def start_close(self) -> None:
        """CLS: stop receiving; the client closes the socket once its in-flight messages settle."""
        self.ready_count = 0
        self.state = STATE_CLOSING
        if self._out:
            self._push_soon()

    def set_auth_state(self, state: AuthState) -> None:
        """What the auth server said, also after a re-query; `authed` means it granted something."""
        self.auth_state = state
        self.authed = bool(state.authorizations)
        self.auth_identity = state.identity
        self.auth_identity_url = state.identity_url

    def close(self) -> None:
        """Drop the connection (server side): the reader greenlet sees EOF and cleans up."""
        if self.closed:
            return
        self.closed = True
        self._stop_timers()
        self._transport.shutdown()

    def finish_connection(self) -> None:
        """The connection's reader greenlet is ending: send what is left (a fatal error's frame), leave the
        channel, stop the timers, close the socket."""
        if not self.closed:
            self.closed = True  # from here on a failed send is the end of the connection, not an error to log
            with gevent.Timeout(self.heartbeat_interval or _FINAL_SEND_SECONDS, False):
                self.drain()  # a peer that reads nothing cannot hold the connection open
        if self.channel is not None:
            self.channel.remove_client(self)
        self._stop_timers()
        self._transport.close()

    def _stop_timers(self) -> None:
        for timer in (self._heartbeat_timer, self._buffer_timer, self._deadline_timer):
            if timer is not None:
                timer.close()
        self._heartbeat_timer = self._buffer_timer = self._deadline_timer = None


def _common_name(cert: dict) -> str:
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return ""
