"""One nsqd → nsqlookupd connection (nsqd's lookupPeer): lazy connect, one command at a time.

The wire protocol is `  V1`, then line commands (IDENTIFY carries a 4-byte length and a JSON body), each
answered by `[size int32 BE][data]` with no frame type. Dialing, each write and each read have a 1 s deadline.
A failed command closes the connection; the next command dials again and first runs the connect callback
(IDENTIFY and REGISTER everything), exactly like nsqd.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from ..go.gocompat import join_host_port
from ..runtime.listen import split_host_port
from ..runtime.log import Logger

MAGIC_V1 = b"  V1"
_TIMEOUT = 1.0
_SIZE = struct.Struct(">i")


class PeerError(Exception):
    """A command could not complete; the text is what nsqd logs after `LOOKUPD(<addr>): <cmd> - `."""


@dataclass(frozen=True, slots=True)
class Command:
    """A lookupd command line, optionally with a body (go-nsq's Command)."""

    name: str
    params: tuple[str, ...] = ()
    body: bytes | None = None

    def __str__(self) -> str:
        return " ".join((self.name, *self.params))

    def to_bytes(self) -> bytes:
        data = str(self).encode() + b"\n"
        if self.body is not None:
            data += _SIZE.pack(len(self.body)) + self.body
        return data


def register(topic: str, channel: str = "") -> Command:
    return Command("REGISTER", (topic, channel) if channel else (topic,))


def unregister(topic: str, channel: str = "") -> Command:
    return Command("UNREGISTER", (topic, channel) if channel else (topic,))


PING = Command("PING")


#: nsqd's peerInfo struct for gojson: json name -> (Go kind, int bits)
_PEER_INFO_STRUCT = {"tcp_port": (int, 64), "http_port": (int, 64), "version": (str, 0), "broadcast_address": (str, 0)}


@dataclass(slots=True)
class PeerInfo:
    """What lookupd says about itself in its IDENTIFY reply."""

    tcp_port: int = 0
    http_port: int = 0
    version: str = ""
    broadcast_address: str = ""

    def __str__(self) -> str:
        """Go's `%+v` of nsqd's peerInfo struct."""
        return (f"{{TCPPort:{self.tcp_port} HTTPPort:{self.http_port} Version:{self.version} "
                f"BroadcastAddress:{self.broadcast_address}}}")

    @classmethod
    def from_json(cls, data: bytes) -> PeerInfo:
        """lookupd's IDENTIFY reply; ValueError (GoJSONError) where Go's json.Unmarshal into peerInfo would fail."""
        from ..go.gojson import decode_struct  # here: its regexes cost every start, and only a lookupd peer needs it

        return cls(**decode_struct(data, _PEER_INFO_STRUCT))

    @property
    def http_address(self) -> str:
        """`host:port` of lookupd's HTTP API (net.JoinHostPort)."""
        return join_host_port(self.broadcast_address, self.http_port)


class LookupPeer:
    """A lookupd address and, while connected, its socket. Not safe for concurrent use: the lookup loop
    is the only caller."""

    def __init__(self, address: str, max_body_size: int, logger: Logger,
                 on_connect: Callable[[LookupPeer], None]) -> None:
        self.address = address
        self.info = PeerInfo()
        self._max_body_size = max_body_size
        self._logger = logger
        self._on_connect = on_connect
        self._sock: socket.socket | None = None

    def __str__(self) -> str:
        return self.address

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def command(self, cmd: Command | None) -> bytes | None:
        """Send ``cmd`` and return the reply, connecting (and running the callback) first if needed.
        ``None`` only connects. PeerError when the connection fails; the peer is then closed."""
        if self._sock is None:
            self._connect()
            self._on_connect(self)
        if cmd is None:
            return None
        sock = self._sock
        if sock is None:  # the connect callback gave up on this connection
            raise PeerError(f"write tcp {self.address}: use of closed network connection")
        op = "write"
        try:
            sock.sendall(cmd.to_bytes())
            op = "read"
            (size,) = _SIZE.unpack(self._read(sock, 4))
            if size > self._max_body_size:
                raise PeerError(f"response body size ({size}) is greater than limit ({self._max_body_size})")
            return self._read(sock, max(size, 0))
        except (OSError, PeerError) as err:
            self.close()
            raise PeerError(_go_error(err, self.address, op)) from None

    def check_closed(self) -> bool:
        """Between commands lookupd never sends anything: a readable socket means it went away (EOF or
        reset). Then close, so the next command reconnects; True when that happened."""
        sock = self._sock
        if sock is None:
            return False
        sock.settimeout(0)
        try:
            gone = sock.recv(1, socket.MSG_PEEK) == b""
        except BlockingIOError:
            gone = False
        except OSError:
            gone = True
        finally:
            sock.settimeout(_TIMEOUT)
        if gone:
            self.close()
        return gone

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _connect(self) -> None:
        self._logger.info(f"LOOKUP connecting to {self.address}")
        try:
            host, port = split_host_port(self.address)
            sock = socket.create_connection((host, port), timeout=_TIMEOUT)
        except (OSError, ValueError) as err:
            raise PeerError(_go_error(err, self.address, "dial")) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        try:
            sock.sendall(MAGIC_V1)
        except OSError:
            self.close()  # nsqd ignores this write's error; its next write fails the same way

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes:
        chunks = []
        while n:
            chunk = sock.recv(min(n, 65536))
            if not chunk:
                raise PeerError("EOF")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def _go_error(err: Exception, address: str, op: str) -> str:
    """Roughly Go's net error text (`dial tcp <addr>: connect: connection refused`, `... i/o timeout`)."""
    if isinstance(err, PeerError):
        return str(err)
    if isinstance(err, TimeoutError):
        return f"{op} tcp {address}: i/o timeout"
    if isinstance(err, ValueError):
        return f"{op} tcp {address}: address {address}: missing port in address"
    reason = (getattr(err, "strerror", None) or str(err)).lower()
    if op == "dial":
        return f"dial tcp {address}: connect: {reason}"
    return f"{op} tcp {address}: {reason}"
