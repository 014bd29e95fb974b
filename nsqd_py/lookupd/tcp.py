"""nsqlookupd's TCP side: the `  V1` protocol nsqd nodes register through.

After the 4-byte magic, each line is a command split on single spaces (surrounding whitespace trimmed);
every reply is `[size int32 BE][data]`. Commands: `IDENTIFY` + `[len][json]` (once, before anything but
PING), `REGISTER <topic> [<channel>]`, `UNREGISTER <topic> [<channel>]`, `PING`. Every error is sent as
`<CODE> <text>` and closes the connection; a closed connection drops all of that peer's registrations.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson
from gevent.server import StreamServer

from ..go.durations import format_duration
from ..go.gojson import decode_struct
from ..runtime.listen import display_address, peer_address
from ..runtime.version import NSQ_VERSION
from ..wire.names import is_valid_name
from .registration_db import PeerInfo, Registration

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd

_SIZE = struct.Struct(">i")
_MAGIC_V1 = b"  V1"
#: the largest IDENTIFY body read (nsqlookupd has no limit; nsqd's default --max-body-size)
_MAX_BODY = 5 * 1024 * 1024
#: nsqlookupd's PeerInfo struct for gojson: json name -> (Go kind, int bits)
_PEER_STRUCT = {"hostname": (str, 0), "broadcast_address": (str, 0), "tcp_port": (int, 64), "http_port": (int, 64),
                "version": (str, 0), "topology_zone": (str, 0), "topology_region": (str, 0)}


class ClientError(Exception):
    """A fatal protocol error: sent as `<code> <text>`; ``cause`` is logged after it."""

    def __init__(self, code: str, text: str, cause: str = "") -> None:
        super().__init__(f"{code} {text}")
        self.cause = cause


def send_response(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_SIZE.pack(len(data)) + data)


class LookupdTCPServer:
    def __init__(self, lookupd: NSQLookupd, listener: socket.socket) -> None:
        self.lookupd = lookupd
        self.address = display_address(listener)
        self._connections: set[socket.socket] = set()
        self._server = StreamServer(listener, self._handle)

    def start(self) -> None:
        self.lookupd.logger.info(f"TCP: listening on {self.address}")
        self._server.start()

    def close(self) -> None:
        self.lookupd.logger.info(f"TCP: closing {self.address}")
        self._server.close()
        for sock in list(self._connections):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _handle(self, sock: socket.socket, address: Any) -> None:
        log = self.lookupd.logger
        remote = peer_address(sock, address)
        log.info(f"TCP: new client({remote})")
        self._connections.add(sock)
        try:
            rfile = sock.makefile("rb")
            magic = rfile.read(4)
            if len(magic) < 4:
                log.error("failed to read protocol version - EOF")
                return
            log.info(f"CLIENT({remote}): desired protocol magic '{magic.decode('latin-1')}'")
            if magic != _MAGIC_V1:
                with contextlib.suppress(OSError):
                    send_response(sock, b"E_BAD_PROTOCOL")
                log.error(f"client({remote}) bad protocol magic '{magic.decode('latin-1')}'")
                return
            error = ProtocolV1(self.lookupd, sock, rfile, remote).io_loop()
            if error:
                log.error(f"client({remote}) - {error}")
        finally:
            self._connections.discard(sock)
            sock.close()


class ProtocolV1:
    """One registered (or registering) nsqd connection."""

    def __init__(self, lookupd: NSQLookupd, sock: socket.socket, rfile: BinaryIO, remote: str) -> None:
        self.lookupd = lookupd
        self.db = lookupd.db
        self.log = lookupd.logger
        self.sock = sock
        self.rfile = rfile
        self.remote = remote
        self.peer: PeerInfo | None = None

    def io_loop(self) -> str:
        """Serve until the connection ends; returns the error text nsqlookupd logs for it ("" for none)."""
        error = ""
        try:
            while True:
                line = self.rfile.readline()
                if not line.endswith(b"\n"):
                    error = "EOF"
                    break
                params = line.decode("utf-8", "surrogateescape").strip().split(" ")
                try:
                    response = self.exec(params)
                except ClientError as err:
                    error = str(err)
                    self.log.error(f"[{self.remote}] - {err}{f' - {err.cause}' if err.cause else ''}")
                    send_response(self.sock, str(err).encode())
                    break
                send_response(self.sock, response)
        except OSError as err:
            error = error or (err.strerror or str(err)).lower()
        self.log.info(f"PROTOCOL(V1): [{self.remote}] exiting ioloop")
        if self.peer is not None:
            for registration in self.db.lookup_registrations(self.peer.id):
                removed, _ = self.db.remove_producer(registration, self.peer.id)
                if removed:
                    self._log_db("UNREGISTER", registration)
        return error

    def exec(self, params: list[str]) -> bytes:
        command = params[0]
        if command == "PING":
            return self.ping()
        if command == "IDENTIFY":
            return self.identify()
        if command in ("REGISTER", "UNREGISTER"):
            peer = self.peer
            if peer is None:
                raise ClientError("E_INVALID", "client must IDENTIFY")
            topic, channel = _topic_channel(command, params[1:])
            if command == "REGISTER":
                return self.register(peer, topic, channel)
            return self.unregister(peer, topic, channel)
        raise ClientError("E_INVALID", f"invalid command {command}")

    def ping(self) -> bytes:
        if self.peer is not None:  # a PING may come before IDENTIFY
            now = time.time_ns()
            self.log.info(f"CLIENT({self.peer.id}): pinged (last ping {format_duration(now - self.peer.last_update)})")
            self.peer.last_update = now
        return b"OK"

    def identify(self) -> bytes:
        if self.peer is not None:
            raise ClientError("E_INVALID", "cannot IDENTIFY again")
        size_bytes = self.rfile.read(4)
        if len(size_bytes) < 4:
            raise ClientError("E_BAD_BODY", "IDENTIFY failed to read body size", "EOF")
        (size,) = _SIZE.unpack(size_bytes)
        body = self.rfile.read(size) if 0 <= size <= _MAX_BODY else b""
        if len(body) != size:
            raise ClientError("E_BAD_BODY", "IDENTIFY failed to read body", "unexpected EOF")
        peer = PeerInfo(id=self.remote, remote_address=self.remote)
        try:
            _decode_peer(body, peer)
        except ValueError as err:
            raise ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body", str(err)) from None
        if not (peer.broadcast_address and peer.tcp_port and peer.http_port and peer.version):
            raise ClientError("E_BAD_BODY", "IDENTIFY missing fields")
        self.log.info(f"CLIENT({self.remote}): IDENTIFY Address:{peer.broadcast_address} TCP:{peer.tcp_port} "
                      f"HTTP:{peer.http_port} Version:{peer.version}")
        self.peer = peer
        if self.db.add_producer(Registration("client", "", ""), peer):
            self._log_db("REGISTER", Registration("client", "", ""))
        lookupd = self.lookupd
        return orjson.dumps({
            "broadcast_address": lookupd.opts.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": lookupd.http_port,
            "tcp_port": lookupd.tcp_port,
            "version": NSQ_VERSION,
        })

    def register(self, peer: PeerInfo, topic: str, channel: str) -> bytes:
        if channel:
            key = Registration("channel", topic, channel)
            if self.db.add_producer(key, peer):
                self._log_db("REGISTER", key)
        key = Registration("topic", topic, "")
        if self.db.add_producer(key, peer):
            self._log_db("REGISTER", key)
        return b"OK"

    def unregister(self, peer: PeerInfo, topic: str, channel: str) -> bytes:
        if channel:
            self._unregister(Registration("channel", topic, channel), peer.id, channel)
            return b"OK"
        # a topic's channels are normally unregistered first; whatever is left goes too, with a warning
        for key in self.db.find_registrations("channel", topic, "*"):
            removed, _ = self.db.remove_producer(key, peer.id)
            if removed:
                self.log.warn(f"client({self.remote}) unexpected UNREGISTER category:channel key:{topic} "
                              f"subkey:{key.subkey}")
        self._unregister(Registration("topic", topic, ""), peer.id, topic)
        return b"OK"

    def _unregister(self, key: Registration, peer_id: str, name: str) -> None:
        """Remove the peer from ``key``; an ephemeral topic or channel goes with its last producer."""
        removed, left = self.db.remove_producer(key, peer_id)
        if removed:
            self._log_db("UNREGISTER", key)
        if left == 0 and name.endswith("#ephemeral"):
            self.db.remove_registration(key)

    def _log_db(self, action: str, key: Registration) -> None:
        self.log.info(f"DB: client({self.remote}) {action} category:{key.category} key:{key.key} "
                      f"subkey:{key.subkey}")


def _topic_channel(command: str, params: list[str]) -> tuple[str, str]:
    if not params:
        raise ClientError("E_INVALID", f"{command} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) > 1 else ""
    if not is_valid_name(topic):
        raise ClientError("E_BAD_TOPIC", f"{command} topic name '{topic}' is not valid")
    if channel and not is_valid_name(channel):
        raise ClientError("E_BAD_CHANNEL", f"{command} channel name '{channel}' is not valid")
    return topic, channel


def _decode_peer(body: bytes, peer: PeerInfo) -> None:
    """Go's json.Unmarshal into PeerInfo (go/gojson.py has the rules); GoJSONError, a ValueError, when it fails."""
    for key, value in decode_struct(body, _PEER_STRUCT).items():
        setattr(peer, key, value)
