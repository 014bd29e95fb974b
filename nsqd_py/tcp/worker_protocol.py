"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

An I/O worker's side of a connection: the protocol runs here, topics and channels are the broker's.

Commands that change the broker go to it as records (records.py) without waiting, except SUB, whose answer decides
what the connection may do next. Answers only the broker can give (to PUB, DPUB, MPUB, SUB) come back in the
order the commands went; an answer the worker gives itself (IDENTIFY, CLS, a heartbeat) waits behind the broker's
answers still due, so the client sees them in the order of its commands.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections import deque
from typing import TYPE_CHECKING

import orjson
from gevent.event import AsyncResult, Event

from ..cluster.auth import AuthServers, AuthState
from . import records
from .client import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, ClientV2
from .client_fields import RECORD_ATTRS
from .errors import FatalClientError
from .protocol import ProtocolV2Base

if TYPE_CHECKING:
    from ..config.options import Options
    from ..runtime.link import Link
    from ..runtime.log import Logger
    from ..runtime.outbox import Outbox

_LENGTH = struct.Struct(">i")
#: how long a closing connection waits for the broker's answers to its last commands (a publish may wait for fsync)
_ANSWERS_DUE_SECONDS = 10.0
#: the commands, and their bytes, a connection may have on their way to the broker before it stops reading: a
#: publisher faster than the disk is held back by TCP, as Go's one command at a time holds it
_DUE_COMMANDS_MAX = 64
_DUE_BYTES_MAX = 1 << 20


class ForwardingClient(ClientV2):
    """A client connection of a worker (the broker keeps it as a `remote_clients.RemoteClient`): answers held in
    command order, the broker's deliveries and verdicts."""

    __slots__ = ("_answered_all", "_due_bytes", "_due_sizes", "_held", "_link", "_room", "_waiters", "broker_ended",
                 "created_topics")

    def __init__(self, opts: Options, logger: Logger, conn: int, sock: socket.socket, remote_address: str,
                 outbox: Outbox, link: Link) -> None:
        super().__init__(opts, logger, conn, sock, remote_address, outbox)
        self._link = link
        #: one entry per command the broker still has to answer: None when the answer goes to the client, else
        #: the result a waiting command reads
        self._waiters: deque[AsyncResult | None] = deque()
        self._due_sizes: deque[int] = deque()  # the payload size of each, and their sum
        self._due_bytes = 0
        #: set when the broker caught up with a connection that stopped reading (too much due)
        self._room: Event | None = None
        #: the worker's own answers, held until the broker's due before them went out
        self._held: list[tuple[bytes, int]] = []
        #: the broker failed a command fatally: the connection ends at its next read
        self.broker_ended = False
        #: topics this connection's MPUBs created already
        self.created_topics: set[str] = set()
        #: set when the broker answered every command (made by a closing connection that waits for that)
        self._answered_all: Event | None = None

    # ---- commands out ---------------------------------------------------------------------------

    def forward(self, kind: int, payload: bytes = b"") -> None:
        self._link.send(kind, self.id, payload)

    def forward_awaited(self, kind: int, payload: bytes) -> None:
        """Forward a command whose answer (or fatal error) goes to the client when it comes."""
        self._due(None, len(payload))
        self._link.send(kind, self.id, payload)
        if len(self._waiters) >= _DUE_COMMANDS_MAX or self._due_bytes >= _DUE_BYTES_MAX:
            self._room = Event()
            self._room.wait()

    def ask(self, kind: int, payload: bytes) -> bytes:
        """Forward a command and wait for its answer; FatalClientError when the broker refused it."""
        result = AsyncResult()
        self._due(result, len(payload))
        self._link.send(kind, self.id, payload)
        answer: bytes = result.get()
        return answer

    def send_identity(self) -> None:
        """Tell the broker what /stats shows of this client and how to deliver to it."""
        # client_fields.RECORD_ATTRS; read back by remote_clients.RemoteClient.set_identity
        self.forward(records.IDENTITY, orjson.dumps({attr: getattr(self, attr) for attr in RECORD_ATTRS}))

    def set_auth_state(self, state: AuthState) -> None:
        super().set_auth_state(state)
        self.send_identity()

    # ---- answers in -----------------------------------------------------------------------------

    def send_response(self, data: bytes, frame_type: int = FRAME_TYPE_RESPONSE) -> None:
        if self._waiters:
            self._held.append((data, frame_type))
        else:
            super().send_response(data, frame_type)

    def answered(self, data: bytes) -> None:
        """The broker's answer to the oldest command still due (empty: nothing to send)."""
        if not self._waiters:
            return
        waiter = self._pop_due()
        if waiter is not None:
            waiter.set(data)
        elif data:
            super().send_response(data)
        self._release_held()

    def refused(self, data: bytes) -> None:
        """The broker failed the oldest command due, fatally: the error frame goes out, the connection ends."""
        waiter = self._pop_due() if self._waiters else None
        code, _, text = data.decode("utf-8", "surrogateescape").partition(" ")
        if waiter is not None:
            waiter.set_exception(FatalClientError(code, text))
            return
        super().send_response(data, FRAME_TYPE_ERROR)
        self.logger.error(f"[{self}] - {code} {text}")
        self.end_reading()

    def end_reading(self) -> None:
        self.broker_ended = True
        self._waiters.clear()
        self._due_sizes.clear()
        self._due_bytes = 0
        self._held.clear()
        self._make_room()
        self._loop.run_callback(self._interrupt_read)

    def _interrupt_read(self) -> None:
        """In the hub: a throw from the link's greenlet would leave that greenlet never resumed."""
        if self._reading:
            self._reader.throw(EOFError())

    def read_line(self) -> bytes:
        if self.broker_ended:
            raise EOFError
        return super().read_line()

    def _due(self, waiter: AsyncResult | None, size: int) -> None:
        self._waiters.append(waiter)
        self._due_sizes.append(size)
        self._due_bytes += size

    def _pop_due(self) -> AsyncResult | None:
        self._due_bytes -= self._due_sizes.popleft()
        if self._room is not None and len(self._waiters) <= _DUE_COMMANDS_MAX // 2 \
                and self._due_bytes <= _DUE_BYTES_MAX // 2:
            self._make_room()
        return self._waiters.popleft()

    def _make_room(self) -> None:
        if self._room is not None:
            self._room.set()
            self._room = None

    def _release_held(self) -> None:
        if self._waiters:
            return
        if self._held:
            held = self._held
            self._held = []
            for data, frame_type in held:
                super().send_response(data, frame_type)
        if self._answered_all is not None:
            self._answered_all.set()

    def finish_connection(self) -> None:
        """The answers the broker still owes go out first (a fatal error's frame waits behind them)."""
        if self._waiters and not self.broker_ended and not self._link.closed:
            self._answered_all = Event()
            self._answered_all.wait(_ANSWERS_DUE_SECONDS)
        super().finish_connection()


class WorkerProtocolV2(ProtocolV2Base):
    """Protocol V2 in an I/O worker: checks here, topics and channels in the broker."""

    def __init__(self, opts: Options, logger: Logger, auth_servers: AuthServers | None,
                 tls_context: ssl.SSLContext | None, client: ForwardingClient) -> None:
        super().__init__(opts, logger, auth_servers, tls_context, client)
        self.forwarding = client

    def identify(self, params: list[bytes]) -> bytes | None:
        answer = super().identify(params)
        self.forwarding.send_identity()
        return answer

    def cls(self, params: list[bytes]) -> bytes:
        answer = super().cls(params)
        self.forwarding.forward(records.CLS)
        return answer

    def _subscribe(self, topic_name: str, channel_name: str) -> None:
        self.forwarding.ask(records.SUB, f"{topic_name}\n{channel_name}".encode("latin-1"))

    def _ready(self, count: int) -> None:
        self.forwarding.forward(records.RDY, str(count).encode())

    def _finish(self, msg_id: bytes) -> None:
        self.forwarding.forward(records.FIN, msg_id)

    def _requeue(self, msg_id: bytes, delay_ms: int) -> None:
        self.forwarding.forward(records.REQ, msg_id + str(delay_ms).encode())

    def _touch(self, msg_id: bytes) -> None:
        self.forwarding.forward(records.TOUCH, msg_id)

    def _publish(self, topic_name: str, cmd: str, bodies: list[bytes], deferred_ms: int = 0) -> bytes | None:
        topic = topic_name.encode("latin-1")
        if cmd == "PUB":
            self.forwarding.forward_awaited(records.PUB, topic + b"\n" + bodies[0])
        elif cmd == "DPUB":
            self.forwarding.forward_awaited(records.DPUB, b"%s\n%d\n%s" % (topic, deferred_ms, bodies[0]))
        else:
            pack = _LENGTH.pack
            self.forwarding.forward_awaited(records.MPUB, topic + b"\n" + b"".join(
                pack(len(body)) + body for body in bodies))
        return None

    def _create_topic(self, cmd: str, name: str) -> None:
        client = self.forwarding
        if name not in client.created_topics:
            client.created_topics.add(name)
            client.forward_awaited(records.CREATE_TOPIC, f"{name}\n{cmd}".encode("latin-1"))


class WorkerEnd:
    """The worker's end of its link to the broker (whose end is remote_clients.BrokerEnd): the worker's connections
    by number, and what the broker's records do to them."""

    def __init__(self) -> None:
        self.clients: dict[int, ForwardingClient] = {}

    def handle(self, kind: int, conn: int, payload: bytes) -> None:
        """One record from the broker (records.py's broker -> worker kinds; HELLO and EXIT are the process's)."""
        client = self.clients.get(conn)
        if client is None:
            return  # it closed while the record was on its way
        if kind == records.MESSAGE:
            client.send_message_frame(payload, False)
        elif kind == records.MESSAGE_NOW:
            client.send_message_frame(payload, True)
        elif kind == records.ANSWER:
            client.answered(payload)
        elif kind == records.ERROR:
            ClientV2.send_response(client, payload, FRAME_TYPE_ERROR)
        elif kind == records.FATAL:
            client.refused(payload)
        elif kind == records.KICK:
            client.close()
