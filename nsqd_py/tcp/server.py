"""The TCP front door: a gevent StreamServer, one greenlet per connection, the magic check."""

from __future__ import annotations

import contextlib
import socket
import struct
from typing import TYPE_CHECKING

from gevent.server import StreamServer

from ..cluster.context import ServerContext
from ..runtime.listen import display_address, peer_address, remove_socket_file, unix_path
from ..runtime.log import Logger
from ..runtime.outbox import Outbox

if TYPE_CHECKING:
    from .client import ClientV2

_BAD_PROTOCOL_FRAME = struct.pack(">ii", 4 + len(b"E_BAD_PROTOCOL"), 1) + b"E_BAD_PROTOCOL"
_MAGIC_V2 = b"  V2"


class TCPServer:
    """Accepts protocol V2 clients for one NSQD."""

    def __init__(self, ctx: ServerContext, listener: socket.socket) -> None:
        self.ctx = ctx
        self.nsqd = ctx.nsqd
        self.listener = listener
        self.address = display_address(listener)
        self._unix_path = unix_path(listener)
        self.connections: dict[int, ClientV2] = {}
        self._outbox: Outbox | None = None  # made in the hub's thread, on the first connection
        self._server = StreamServer(listener, self.handle)

    def start(self) -> None:
        self.nsqd.logger.info(f"TCP: listening on {self.address}")
        self._server.start()

    def close_listener(self) -> None:
        self.nsqd.logger.info(f"TCP: closing {self.address}")
        self._server.close()
        remove_socket_file(self._unix_path)

    def close_clients(self) -> None:
        for client in list(self.connections.values()):
            client.close()

    def handle(self, sock: socket.socket, address: object) -> None:
        """Serve one accepted connection until it ends (the StreamServer calls it; in-process tests too)."""
        nsqd = self.nsqd
        remote = greet(sock, address, nsqd.logger)
        if remote is None:
            return
        # here: the first client pays for the protocol's modules (~4 ms), not every start before /ping answers
        from .client import ClientV2
        from .protocol import ProtocolV2

        if self._outbox is None:
            self._outbox = Outbox()
        client = ClientV2(nsqd.opts, nsqd.logger, nsqd.new_client_id(), sock, remote, self._outbox)
        self.connections[client.id] = client
        nsqd.add_client(client.id, client)
        try:
            ProtocolV2(self.ctx, client).io_loop()
        finally:
            nsqd.remove_client(client.id)
            self.connections.pop(client.id, None)


def greet(sock: socket.socket, address: object, log: Logger) -> str | None:
    """A new connection's first steps, logged as nsqd logs them: its remote address once it sent protocol V2's
    magic; None (the socket closed) when it sent something else or nothing."""
    remote = peer_address(sock, address)
    if sock.family != socket.AF_UNIX:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    log.info(f"TCP: new client({remote})")
    try:
        magic = _read_magic(sock)
    except OSError as err:
        log.error(f"failed to read protocol version - {err}")
        sock.close()
        return None
    log.info(f"CLIENT({remote}): desired protocol magic '{magic.decode('latin-1')}'")
    if magic != _MAGIC_V2:
        with contextlib.suppress(OSError):
            sock.sendall(_BAD_PROTOCOL_FRAME)
        sock.close()
        log.error(f"client({remote}) bad protocol magic '{magic.decode('latin-1')}'")
        return None
    return remote


def _read_magic(sock: socket.socket) -> bytes:
    sock.settimeout(None)
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            raise OSError("EOF")
        data += chunk
    return data
