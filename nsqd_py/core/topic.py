"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Topic: accepts published messages and fans each one out to every channel.

With channels present and nothing queued, fan-out happens in the publishing greenlet. Messages
published while the topic has no channels, is paused, or already has a backlog wait in the
topic's memory queue or disk queue; a pump greenlet drains that backlog when channels appear.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final, cast

import gevent

from ..config.queue_settings import QueueSettings
from .channel import Channel
from .disk.retained_log import RetainedLog
from .errors import BackendError, DrainingError, ExitingError, QueueFullError
from .guid import GuidFactory
from .message import Parked, encode_record_header, parked_delay
from .message_queue import MessageQueue

if TYPE_CHECKING:
    from .message import Message
    from .nsqd import NSQD

_YIELD_EVERY: Final = 256


class Topic:
    __slots__ = (
        "_channel_list",
        "_guid",
        "_keeps_deferred",
        "_nsqd",
        "_pump",
        "_queue",
        "_rejecting",
        "_retain_to",
        "channels",
        "draining",
        "ephemeral",
        "exiting",
        "message_bytes",
        "message_count",
        "name",
        "paused",
        "retained",
        "settings",
    )

    def __init__(self, name: str, nsqd: NSQD) -> None:
        self.name = name
        self._nsqd = nsqd
        self.ephemeral = name.endswith("#ephemeral")
        self.channels: dict[str, Channel] = {}
        self._channel_list: list[Channel] = []
        #: the channels that refuse a publish at their limit (channel_overflow=reject-publish)
        self._rejecting: list[Channel] = []
        backend = nsqd.new_backend(name, self.ephemeral, before_sync=self._sync_channels)
        self._queue = MessageQueue(backend, nsqd.opts.mem_queue_size, nsqd.logger, f"TOPIC({name})")
        self._guid = GuidFactory(nsqd.opts.node_id)
        #: --persist-deferred: a DPUB goes straight to the channels, past a backlog, so its delay reaches their stores
        #: instead of waiting in the topic's disk queue, which would forget it
        self._keeps_deferred = nsqd.opts.persist_deferred
        self._pump: gevent.Greenlet | None = None
        self.paused = False
        self.exiting = False
        #: beyond nsqd: nsqd drains (NSQD.drain), so no publish and no new channel
        self.draining = nsqd.draining
        self.message_count = 0
        self.message_bytes = 0
        #: the controls beyond nsqd set on this topic (its channels' defaults)
        self.settings = QueueSettings(nsqd.opts)
        #: beyond nsqd: the retained log (opened when retention is first on, kept when it goes off), and the log
        #: every publish is appended to (None: retention is off)
        self.retained: RetainedLog | None = None
        self._retain_to: RetainedLog | None = None
        self._retention_changed()

    # ---- stats ----------------------------------------------------------------------------------

    def depth(self) -> int:
        return len(self._queue)

    def backend_depth(self) -> int:
        return self._queue.backend_depth()

    def peek(self, limit: int) -> list[Message]:
        """Up to ``limit`` messages of the topic's own backlog (no channel yet, or paused), in the order its channels
        would get them, as copies: nothing is taken off the queue (/topic/peek)."""
        return [msg for msg, _on_disk in self._queue.peek(limit)]

    # ---- channels -------------------------------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        """The channel, created (and announced) on first use; DrainingError for a new one while nsqd drains."""
        channel = self.channels.get(name)
        if channel is not None:
            return channel
        if self.exiting:
            raise ExitingError()
        if self.draining:
            raise DrainingError()
        channel = Channel(self, name, self._nsqd)
        self.channels[name] = channel
        self._channel_list = list(self.channels.values())
        self.settings_changed()
        self._nsqd.logger.info(f"TOPIC({self.name}): new channel({name})")
        self._nsqd.on_channel_created(self, channel)
        self._start_pump()
        return channel

    def settings_changed(self) -> None:
        """The topic's or a channel's settings changed: every channel takes the values now in force."""
        for channel in self._channel_list:
            channel.settings_changed()
        self._rejecting = [c for c in self._channel_list if c.reject_publish]
        self._retention_changed()

    def _retention_changed(self) -> None:
        """Take the retention in force: on, every publish is appended to the retained log (made on first use); off,
        nothing more is, and the log trims what no replay still needs."""
        age, size = self.settings.value("topic_retention"), self.settings.value("topic_retention_bytes")
        if (age or size) and self.retained is None and not self.ephemeral:
            self.retained = self._nsqd.retained_log(self.name)
        if self.retained is not None:
            self.retained.configure(age, size)
        self._retain_to = self.retained if age or size else None

    def get_existing_channel(self, name: str) -> Channel | None:
        return self.channels.get(name)

    def delete_existing_channel(self, name: str) -> bool:
        """Delete a channel and its data; False when there is no such channel."""
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        self._channel_list = list(self.channels.values())
        self._rejecting = [c for c in self._channel_list if c.reject_publish]
        self._nsqd.logger.info(f"TOPIC({self.name}): deleting channel {name}")
        channel.close(delete=True)
        self._nsqd.on_channel_deleted(self, channel)
        if self.ephemeral and not self.channels and not self.exiting:
            gevent.spawn(self._nsqd.delete_existing_topic, self.name)
        return True

    # ---- publishing ---------------------------------------------------------------------------

    def publish(self, bodies: list[bytes], deferred: float = 0.0) -> None:
        """Accept published bodies as new messages (consecutive ids, one timestamp).

        ExitingError while closing, DrainingError while nsqd drains, BackendError when a disk write fails
        (like nsqd, the messages before the failing write stay accepted) or the acks refuse an OK (with
        --sync-every=1 it returns once the messages are on disk; see disk/acks.py).
        """
        if self.exiting:
            raise ExitingError()
        if self.draining:
            raise DrainingError()
        if self._rejecting:
            self._check_room(bodies)
        acks = self._nsqd.acks
        begun = acks.begin()
        header = encode_record_header(time.time_ns(), 0)
        ids = self._guid.new_ids(len(bodies))
        parked: list[Parked] = []
        size = 0
        for i, body in enumerate(bodies):
            parked.append(header + ids[i] + body)
            size += len(body)
        retain_to = self._retain_to
        if retain_to is not None:
            self._retain(retain_to, cast(list[bytes], parked))
        if deferred:
            delay: Any = deferred  # boxed once for all the messages
            parked = [(cast(bytes, record), delay, None) for record in parked]
        self._accept(parked, size)
        acks.settle(begun)

    def _check_room(self, bodies: list[bytes]) -> None:
        """QueueFullError when the publish would put a reject-publish channel over its limit."""
        size = sum(len(body) for body in bodies)
        for channel in self._rejecting:
            if channel.rejects(len(bodies), size):
                raise QueueFullError(f"channel {self.name}:{channel.name} is full ({channel.limits()})")

    def republish(self, record: bytes, body_size: int) -> None:
        """A message that keeps its id, timestamp and attempts (a dead letter moved here); returns, or raises, as
        publish does (with --sync-every=1 once it is on disk). No channel's reject-publish limit, and no drain, refuses
        it."""
        if self.exiting:
            raise ExitingError()
        acks = self._nsqd.acks
        begun = acks.begin()
        retain_to = self._retain_to
        if retain_to is not None:
            self._retain(retain_to, [record])
        self._accept([record], body_size)
        acks.settle(begun)

    def _retain(self, log: RetainedLog, records: list[bytes]) -> None:
        """Append to the retained log first: a publish it could not keep is refused whole."""
        try:
            log.append(records)
        except BackendError as err:
            self._nsqd.set_health(err)
            raise

    def _accept(self, parked: list[Parked], size: int) -> None:
        if self._channel_list and not self.paused and (
                (self._pump is None and not self._queue) or (self._keeps_deferred and parked_delay(parked[0]))):
            for channel in self._channel_list:
                channel.put_parked_batch(parked)
        else:
            self._enqueue_all(parked)
        self.message_count += len(parked)
        self.message_bytes += size

    def _enqueue_all(self, parked: list[Parked]) -> None:
        try:
            to_disk = self._queue.push_parked_batch(parked)
        except BackendError as err:
            self._nsqd.set_health(err)
            raise
        finally:
            self._start_pump()
        if to_disk:
            self._nsqd.set_health(None)

    # ---- backlog pump -------------------------------------------------------------------------

    def _start_pump(self) -> None:
        if self._pump is None and self._channel_list and not self.paused and not self.exiting and self._queue:
            self._pump = gevent.spawn(self._drain)

    def _drain(self) -> None:
        moved = 0
        try:
            while self._channel_list and not self.paused and not self.exiting:
                item = self._queue.pop_parked()
                if item is None:
                    return
                parked, token = item
                for channel in self._channel_list:
                    channel.put_parked(parked)
                if token is not None:
                    self._queue.ack(token)
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
        self._queue.clear_memory()
        self._queue.backend.empty()

    def close(self, delete: bool) -> None:
        """Stop: ``delete`` removes every channel and file, else everything is flushed to disk."""
        if self.exiting:
            return
        self.exiting = True
        log = self._nsqd.logger
        log.info(f"TOPIC({self.name}): {'deleting' if delete else 'closing'}")
        if self._pump is not None:
            self._pump.join(timeout=5)  # it stops at its next message once exiting is set
        if self.retained is not None:
            if delete:
                self.retained.delete()
            else:
                self.retained.close()
        if delete:
            for channel in list(self.channels.values()):
                channel.close(delete=True)
            self.channels.clear()
            self._channel_list = []
            self._queue.clear_memory()
            self._queue.backend.delete()
            return
        for channel in list(self.channels.values()):
            channel.close(delete=False)
        memory = self._queue.take_memory()
        if memory:
            log.info(f"TOPIC({self.name}): flushing {len(memory)} memory messages to backend")
        for msg in memory:
            try:
                self._queue.write_to_backend(msg)
            except BackendError as err:
                log.error(f"TOPIC({self.name}): failed to write message to backend - {err}")
        self._queue.backend.close()
