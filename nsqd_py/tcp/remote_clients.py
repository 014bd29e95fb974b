"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

The broker's side of an I/O worker: the worker's connections as consumers and producers of this broker.

A worker forwards what its clients' commands do to topics and channels (records.py); this applies them with the
same rules and answers as a connection served here (broker_commands.py). Records that cannot block (RDY, FIN,
REQ, TOUCH, CLS, and a publish to a settled topic when OK does not wait for a disk) are applied as they are read;
the others (SUB, a publish that waits for fsync or a new topic's metadata) run in a greenlet of their
connection, in order with its other publishes, so one slow command holds up nobody else.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import gevent
import orjson

from ..core.consumer import STATE_CLOSING, STATE_SUBSCRIBED
from . import broker_commands, records
from .client_fields import RECORD_ATTRS
from .client_state import ClientState
from .errors import ClientError, FatalClientError

if TYPE_CHECKING:
    from ..core.channel import Channel
    from ..core.message import Message
    from ..core.nsqd import NSQD
    from ..runtime.link import Link

_LENGTH = struct.Struct(">i")
_ID_LENGTH = 16


class RemoteClient(ClientState):
    """A worker's connection as the broker keeps it (the worker's end is worker_protocol.ForwardingClient): delivery
    state, and what /stats shows of it."""

    __slots__ = ("_commands", "conn", "ended", "link")

    def __init__(self, link: Link, conn: int, client_id: int, remote_address: str, msg_timeout: float) -> None:
        super().__init__(client_id, remote_address, msg_timeout)
        self.link = link
        self.conn = conn
        #: the connection closed, or the broker failed one of its commands fatally (the worker then closes it): its
        #: later commands are ignored
        self.ended = False
        #: commands waiting for the connection's greenlet (None: it is not running)
        self._commands: deque[Callable[[], None]] | None = None

    def send_message(self, msg: Message) -> None:
        self.link.send(records.MESSAGE if self.is_ready() else records.MESSAGE_NOW, self.conn, msg.frame())

    def close(self) -> None:
        self.link.send(records.KICK, self.conn)

    def set_identity(self, fields: dict) -> None:
        """An IDENTITY record's fields (client_fields.RECORD_ATTRS; sent by ForwardingClient.send_identity)."""
        for name in RECORD_ATTRS:
            setattr(self, name, fields[name])

    def busy(self) -> bool:
        return self._commands is not None

    def run_in_turn(self, command: Callable[[], None]) -> None:
        """Run ``command`` in this connection's greenlet, after the ones before it."""
        if self._commands is None:
            self._commands = deque([command])
            gevent.spawn(self._run_commands)
        else:
            self._commands.append(command)

    def _run_commands(self) -> None:
        commands = self._commands
        assert commands is not None
        try:
            while commands:
                command = commands.popleft()
                if not self.ended:
                    command()
        finally:
            self._commands = None


class BrokerEnd:
    """The broker's end of one I/O worker's link (whose end is worker_protocol.WorkerEnd): the worker's connections,
    and what its records do to the broker."""

    def __init__(self, nsqd: NSQD, link: Link) -> None:
        self.nsqd = nsqd
        self.link = link
        self.clients: dict[int, RemoteClient] = {}
        self._to_dispatch: set[Channel] = set()
        #: what each worker -> broker record kind does (records.py), called by `handle`
        self._handlers: dict[int, Callable[[RemoteClient, bytes], None]] = {
            records.IDENTITY: self._identity,
            records.SUB: self._sub,
            records.RDY: self._rdy,
            records.FIN: self._fin,
            records.REQ: self._req,
            records.TOUCH: self._touch,
            records.CLS: self._cls,
            records.PUB: self._pub,
            records.DPUB: self._dpub,
            records.MPUB: self._mpub,
            records.CREATE_TOPIC: self._create_topic,
            records.CLOSED: self._closed,
        }

    def handle(self, kind: int, conn: int, payload: bytes) -> None:
        if kind == records.OPEN:
            self._open(conn, payload)
            return
        client = self.clients.get(conn)
        if client is not None and (not client.ended or kind == records.CLOSED):
            self._handlers[kind](client, payload)  # one of self._handlers' methods (__init__)

    def after_read(self) -> None:
        """Refill the consumers whose FINs this read brought, once per channel."""
        if self._to_dispatch:
            channels = self._to_dispatch
            self._to_dispatch = set()
            for channel in channels:
                channel.dispatch()

    def drop_all(self) -> None:
        """The worker is gone: its connections are too."""
        for client in list(self.clients.values()):
            self._closed(client, b"")

    # ---- records ----------------------------------------------------------------------------------

    def _open(self, conn: int, payload: bytes) -> None:
        nsqd = self.nsqd
        client = RemoteClient(self.link, conn, nsqd.new_client_id(), payload.decode(), nsqd.opts.msg_timeout / 1e9)
        self.clients[conn] = client
        nsqd.add_client(client.id, client)

    def _identity(self, client: RemoteClient, payload: bytes) -> None:
        client.set_identity(orjson.loads(payload))

    def _sub(self, client: RemoteClient, payload: bytes) -> None:
        topic_name, _, channel_name = payload.decode("latin-1").partition("\n")

        def sub() -> None:
            try:
                channel = broker_commands.subscribe(self.nsqd, client, topic_name, channel_name)
            except ClientError as err:
                self._refuse(client, err)
                return
            if client.ended:  # it closed while the subscription waited (a new topic's nsqd.dat write)
                channel.remove_client(client)
                return
            client.channel = channel
            client.state = STATE_SUBSCRIBED
            self.link.send(records.ANSWER, client.conn, broker_commands.OK)

        client.run_in_turn(sub)

    def _rdy(self, client: RemoteClient, payload: bytes) -> None:
        client.ready_count = int(payload)
        if client.channel is not None and client.is_ready():
            client.channel.dispatch()

    def _fin(self, client: RemoteClient, payload: bytes) -> None:
        channel = client.channel
        if channel is not None:
            try:
                broker_commands.finish(channel, client, payload)
            except ClientError as err:
                self._error(client, err)
                return
            self._to_dispatch.add(channel)

    def _req(self, client: RemoteClient, payload: bytes) -> None:
        if client.channel is not None:
            try:
                broker_commands.requeue(client.channel, client, payload[:_ID_LENGTH], int(payload[_ID_LENGTH:]))
            except ClientError as err:
                self._error(client, err)

    def _touch(self, client: RemoteClient, payload: bytes) -> None:
        if client.channel is not None:
            try:
                broker_commands.touch(client.channel, client, payload)
            except ClientError as err:
                self._error(client, err)

    def _cls(self, client: RemoteClient, payload: bytes) -> None:
        client.ready_count = 0
        client.state = STATE_CLOSING

    def _pub(self, client: RemoteClient, payload: bytes) -> None:
        topic, _, body = payload.partition(b"\n")
        self._publish(client, topic.decode("latin-1"), "PUB", [body], 0)

    def _dpub(self, client: RemoteClient, payload: bytes) -> None:
        topic, _, rest = payload.partition(b"\n")
        delay, _, body = rest.partition(b"\n")
        self._publish(client, topic.decode("latin-1"), "DPUB", [body], int(delay))

    def _mpub(self, client: RemoteClient, payload: bytes) -> None:
        topic, _, packed = payload.partition(b"\n")
        bodies = []
        pos = 0
        unpack = _LENGTH.unpack_from
        while pos < len(packed):
            (size,) = unpack(packed, pos)
            bodies.append(packed[pos + 4 : pos + 4 + size])
            pos += 4 + size
        self._publish(client, topic.decode("latin-1"), "MPUB", bodies, 0)

    def _publish(self, client: RemoteClient, topic_name: str, cmd: str, bodies: list[bytes], deferred_ms: int) -> None:
        nsqd = self.nsqd
        if client.busy() or nsqd.acks.durable or not nsqd.metadata_file.is_settled(topic_name) \
                or topic_name not in nsqd.topics:
            client.run_in_turn(partial(self._publish_now, client, topic_name, cmd, bodies, deferred_ms))
        else:
            self._publish_now(client, topic_name, cmd, bodies, deferred_ms)

    def _publish_now(self, client: RemoteClient, topic_name: str, cmd: str, bodies: list[bytes],
                     deferred_ms: int) -> None:
        try:
            broker_commands.publish(self.nsqd, topic_name, cmd, bodies, deferred_ms)
        except FatalClientError as err:
            self._refuse(client, err)
            return
        except ClientError as err:  # a bounded channel's refusal (beyond nsqd): the connection stays
            self._error(client, err)
            return
        client.published(topic_name, len(bodies))
        self.link.send(records.ANSWER, client.conn, broker_commands.OK)

    def _create_topic(self, client: RemoteClient, payload: bytes) -> None:
        topic_name, _, cmd = payload.decode("latin-1").partition("\n")

        def create() -> None:
            try:
                broker_commands.create_topic(self.nsqd, cmd, topic_name)
            except ClientError as err:
                self._refuse(client, err)
                return
            self.link.send(records.ANSWER, client.conn)

        client.run_in_turn(create)

    def _closed(self, client: RemoteClient, payload: bytes) -> None:
        client.ended = True
        self.clients.pop(client.conn, None)
        if client.channel is not None:
            client.channel.remove_client(client)
        self.nsqd.remove_client(client.id)

    def _refuse(self, client: RemoteClient, err: ClientError) -> None:
        client.ended = True
        self.link.send(records.FATAL, client.conn, err.payload)

    def _error(self, client: RemoteClient, err: ClientError) -> None:
        self.nsqd.logger.error(f"[{client.remote_address}] - {err}")
        self.link.send(records.ERROR, client.conn, err.payload)
