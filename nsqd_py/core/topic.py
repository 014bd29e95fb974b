"""Topic: accepts published messages and fans each one out to every channel.

With channels present and nothing queued, fan-out happens in the publishing greenlet. Messages
published while the topic has no channels, is paused, or already has a backlog wait in the
topic's memory queue or disk queue; a pump greenlet drains that backlog when channels appear.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

import gevent

from .channel import Channel
from .diskqueue import BackendError
from .errors import ExitingError
from .guid import GuidFactory
from .message import Message

if TYPE_CHECKING:
    from .nsqd import NSQD

_YIELD_EVERY = 256


class Topic:
    __slots__ = (
        "_backend",
        "_channel_list",
        "_guid",
        "_mem_size",
        "_memory",
        "_nsqd",
        "_pump",
        "_take_backend_next",
        "channels",
        "ephemeral",
        "exiting",
        "message_bytes",
        "message_count",
        "name",
        "paused",
    )

    def __init__(self, name: str, nsqd: NSQD) -> None:
        self.name = name
        self._nsqd = nsqd
        self.ephemeral = name.endswith("#ephemeral")
        self.channels: dict[str, Channel] = {}
        self._channel_list: list[Channel] = []
        self._memory: deque[Message] = deque()
        self._mem_size = nsqd.opts.mem_queue_size
        self._backend = nsqd.new_backend(name, self.ephemeral, before_sync=self._sync_channels)
        self._guid = GuidFactory(nsqd.opts.node_id)
        self._pump: gevent.Greenlet | None = None
        self._take_backend_next = False
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.message_bytes = 0

    # ---- stats ----------------------------------------------------------------------------------

    def depth(self) -> int:
        return len(self._memory) + self._backend.depth()

    def backend_depth(self) -> int:
        return self._backend.depth()

    # ---- channels -------------------------------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        """The channel, created (and announced) on first use."""
        channel = self.channels.get(name)
        if channel is not None:
            return channel
        if self.exiting:
            raise ExitingError()
        channel = Channel(self, name, self._nsqd)
        self.channels[name] = channel
        self._channel_list = list(self.channels.values())
        self._nsqd.logger.info(f"TOPIC({self.name}): new channel({name})")
        self._nsqd.on_channel_created(self, channel)
        self._start_pump()
        return channel

    def get_existing_channel(self, name: str) -> Channel | None:
        return self.channels.get(name)

    def delete_existing_channel(self, name: str) -> bool:
        """Delete a channel and its data; False when there is no such channel."""
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        self._channel_list = list(self.channels.values())
        self._nsqd.logger.info(f"TOPIC({self.name}): deleting channel {name}")
        channel.close(delete=True)
        self._nsqd.on_channel_deleted(self, channel)
        if self.ephemeral and not self.channels and not self.exiting:
            gevent.spawn(self._nsqd.delete_existing_topic, self.name)
        return True

    # ---- publishing ---------------------------------------------------------------------------

    def new_message(self, body: bytes, timestamp: int) -> Message:
        return Message(self._guid.new_id(), body, timestamp)

    def publish(self, bodies: list[bytes], deferred: float = 0.0) -> None:
        """Accept published bodies as new messages (consecutive ids, one timestamp).

        ExitingError while closing, BackendError when a disk write fails (like nsqd, the
        messages before the failing one stay accepted).
        """
        if self.exiting:
            raise ExitingError()
        timestamp = time.time_ns()
        msgs = [Message(msg_id, body, timestamp) for msg_id, body in zip(self._guid.new_ids(len(bodies)), bodies,
                                                                          strict=True)]
        if deferred:
            for msg in msgs:
                msg.deferred = deferred
        self.put_many(msgs)

    def put(self, msg: Message) -> None:
        """Accept one message; ExitingError while closing, BackendError when the disk write fails."""
        self.put_many([msg])

    def put_many(self, msgs: list[Message]) -> None:
        if self.exiting:
            raise ExitingError()
        channels = self._channel_list
        if channels and not self.paused and self._pump is None and not self._memory and not self._backend.depth():
            if len(channels) == 1 and not msgs[0].deferred:
                put = channels[0].put
                for msg in msgs:
                    put(msg)
            else:
                for msg in msgs:
                    self._fan_out(msg)
        else:
            try:
                for msg in msgs:
                    self._enqueue(msg)
            finally:
                self._start_pump()
        self.message_count += len(msgs)
        self.message_bytes += sum(len(msg.body) for msg in msgs)

    def _enqueue(self, msg: Message) -> None:
        if len(self._memory) < self._mem_size:
            self._memory.append(msg)
            return
        try:
            self._backend.put(msg.encode())
        except BackendError as err:
            self._nsqd.set_health(err)
            raise
        self._nsqd.set_health(None)

    def _fan_out(self, msg: Message) -> None:
        """Every channel gets its own copy (the first one the original), deferred ones wait."""
        channels = self._channel_list
        copies = [msg] + [msg.copy() for _ in range(len(channels) - 1)]
        delay = msg.deferred
        for channel, copy in zip(channels, copies, strict=True):
            if delay:
                channel.put_deferred(copy, delay)
            else:
                channel.put(copy)

    # ---- backlog pump -------------------------------------------------------------------------

    def _start_pump(self) -> None:
        if self._pump is None and self._channel_list and not self.paused and not self.exiting \
                and (self._memory or self._backend.depth()):
            self._pump = gevent.spawn(self._drain)

    def _pop(self) -> Message | None:
        take_backend = self._take_backend_next or not self._memory
        self._take_backend_next = not self._take_backend_next
        if take_backend:
            while self._backend.depth():
                record = self._backend.read_one()
                if record is None:
                    break
                data, token = record
                try:
                    msg = Message.decode(data)
                except ValueError as err:
                    self._nsqd.logger.error(f"TOPIC({self.name}): failed to decode message - {err}")
                    self._backend.ack(token)
                    continue
                msg.token = token
                return msg
        if self._memory:
            return self._memory.popleft()
        return None

    def _drain(self) -> None:
        moved = 0
        try:
            while self._channel_list and not self.paused and not self.exiting:
                msg = self._pop()
                if msg is None:
                    return
                token, msg.token = msg.token, None
                self._fan_out(msg)
                if token is not None:
                    self._backend.ack(token)
                moved += 1
                if moved % _YIELD_EVERY == 0:
                    gevent.sleep(0)
        finally:
            self._pump = None

    def _sync_channels(self) -> None:
        """Before the topic's read position is persisted, its channels' copies must be on disk."""
        for channel in self._channel_list:
            channel.sync_backend()

    # ---- pause / empty / close ----------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self._start_pump()

    def empty(self) -> None:
        """Drop the topic's own queue (channels keep theirs), like nsqd's /topic/empty."""
        self._memory.clear()
        self._backend.empty()

    def close(self, delete: bool) -> None:
        """Stop: ``delete`` removes every channel and file, else everything is flushed to disk."""
        if self.exiting:
            return
        self.exiting = True
        log = self._nsqd.logger
        log.info(f"TOPIC({self.name}): {'deleting' if delete else 'closing'}")
        if self._pump is not None:
            self._pump.join(timeout=5)  # it stops at its next message once exiting is set
        if delete:
            for channel in list(self.channels.values()):
                channel.close(delete=True)
            self.channels.clear()
            self._channel_list = []
            self._memory.clear()
            self._backend.delete()
            return
        for channel in list(self.channels.values()):
            channel.close(delete=False)
        if self._memory:
            log.info(f"TOPIC({self.name}): flushing {len(self._memory)} memory messages to backend")
        while self._memory:
            msg = self._memory.popleft()
            try:
                self._backend.put(msg.encode())
            except BackendError as err:
                log.error(f"TOPIC({self.name}): failed to write message to backend - {err}")
        self._backend.close()
