"""NSQD: the broker core shared by the TCP and HTTP front doors.

Owns the topic map, the data-path lock, metadata (nsqd.dat), health, the queue-scan loop
that times out in-flight messages and releases deferred ones, and (beyond nsqd) the drain.
"""

from __future__ import annotations

import fcntl
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import gevent
import orjson
from gevent.event import Event

from ..runtime.log import Logger
from ..wire.names import is_valid_name
from .disk.acks import Acks
from .disk.ephemeral import DummyBackend
from .disk.format import data_files_by_queue
from .disk.queue import DiskQueue
from .disk.retained_format import retained_files_by_topic
from .disk.retained_log import RetainedLog
from .edges import BackendQueue, Client
from .errors import DrainingError, ExitingError
from .message import MIN_VALID_MSG_LENGTH
from .metadata import MetadataFile
from .replay import Replays
from .topic import Topic

if TYPE_CHECKING:
    from ..config.options import Options
    from .channel import Channel

METADATA_FILE = "nsqd.dat"


class StartupError(Exception):
    """A fatal start error; the text follows `failed to instantiate nsqd - `."""


class NSQD:
    """The broker: topics, channels, metadata and timers; no sockets in here."""

    def __init__(self, opts: Options, logger: Logger) -> None:
        self.opts = opts
        self.logger = logger
        self.topics: dict[str, Topic] = {}
        #: producers and consumers by client id, for /stats
        self.clients: dict[int, Client] = {}
        self.start_time = int(time.time())
        self.exiting = False
        #: beyond nsqd (drain): no new message, topic or channel; nsqd stops once what is left was delivered
        self.draining = False
        #: set when nsqd should stop (PUT /config/shutdown, the end of a drain); daemon/program.py waits on it
        self.stop_requested = Event()
        self._drain_watch: gevent.Greenlet | None = None
        self._health_error: str | None = None
        self._loading = False
        self._lock_fd: int | None = None
        self._scan_loop: gevent.Greenlet | None = None
        self._next_client_id = 0
        #: called with (event, topic, channel) for topic/channel create/delete (lookupd peers listen)
        self.listeners: list[Callable[[str, Topic, Channel | None], None]] = []
        self.data_path = os.path.abspath(opts.data_path or os.getcwd())
        #: what an OK to a publisher means (with --sync-every=1: on disk, by group commit rounds)
        self.acks = Acks(opts.sync_every, self.set_health)
        #: the data files each queue had when the data dir was first listed; a queue takes its own at its first
        #: open, and files appear later only through the queue that owns them (we hold the data dir's lock), so the
        #: directory is listed once, not once per new queue (an O(files) listing each)
        self._data_files: dict[str, list[int]] | None = None
        #: beyond nsqd: the same for the topics' retained segments (disk/retained_log.py)
        self._retained_files: dict[str, list[int]] | None = None
        #: beyond nsqd: channels being fed their topic's retained log (core/replay.py)
        self.replays = Replays(self)
        self.metadata_file = MetadataFile(os.path.join(self.data_path, METADATA_FILE), lambda: self.topics, logger,
                                          self.set_health)

    # ---- lifecycle ----------------------------------------------------------------------------

    def lock_data_path(self) -> None:
        """Take nsqd's exclusive, non-blocking flock on the data directory."""
        try:
            fd = os.open(self.data_path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            raise StartupError(f"failed to lock data-path: open {self.data_path}: no such file or directory") from None
        except OSError as err:
            reason = (err.strerror or str(err)).lower()
            raise StartupError(f"failed to lock data-path: open {self.data_path}: {reason}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StartupError(
                f"failed to lock data-path: cannot flock directory {self.data_path} - resource temporarily "
                "unavailable (possibly in use by another instance of nsqd)"
            ) from None
        self._lock_fd = fd

    def start(self) -> None:
        self._scan_loop = gevent.spawn(self._queue_scan_loop)

    def exit(self) -> None:
        """Persist metadata, flush every topic and channel to disk, stop the loops, unlock."""
        if self.exiting:
            return
        self.exiting = True
        try:
            self.persist_metadata()
        except OSError as err:
            self.logger.error(f"failed to persist metadata - {err}")
        self.replays.stop_all()
        self.logger.info("NSQ: closing topics")
        for topic in list(self.topics.values()):
            topic.close(delete=False)
        self.logger.info("NSQ: stopping subsystems")
        if self._drain_watch is not None:
            self._drain_watch.kill()
        if self._scan_loop is not None:
            self.logger.info("QUEUESCAN: closing")
            self._scan_loop.kill()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self.logger.info("NSQ: bye")

    # ---- drain (beyond nsqd: RFC nsqio/nsq#1302) ------------------------------------------------

    def drain(self) -> None:
        """Start draining: refuse new messages, topics and channels; once `drained`, ask for the clean shutdown
        (`stop_requested`). A drain cannot be called off; `request_stop` ends it at once."""
        if self.draining or self.exiting:
            return
        self.draining = True
        for topic in self.topics.values():
            topic.draining = True
        self.logger.info("NSQ: draining - refusing new messages, topics and channels")
        self._drain_watch = gevent.spawn(self._watch_drain)

    def request_stop(self) -> None:
        self.stop_requested.set()

    def client_topic(self, name: str) -> Topic:
        """`get_topic` for a client's PUB, SUB or POST: a client may not make a topic while nsqd drains
        (DrainingError; the broker itself still may: dead letters). One call where the message path had two: a
        call from compiled code into this class costs more than what it does."""
        if self.draining and name not in self.topics:
            raise DrainingError()
        return self.get_topic(name)

    def drained(self) -> bool:
        """Nothing is in flight and nothing queued could be given to a consumer now. Not waited for, and left in
        the data dir for the next start: deferred messages, paused topics' and channels' queues, and the queue of a
        topic without channels (a drain refuses new ones)."""
        for topic in self.topics.values():
            if topic.channels and not topic.paused and topic.depth():
                return False
            for channel in topic.channels.values():
                if channel.in_flight_count() or (not channel.paused and channel.depth()):
                    return False
        return True

    def _watch_drain(self) -> None:
        interval = self.opts.queue_scan_interval / 1e9
        while not self.drained():
            gevent.sleep(interval)
        left = sum(t.depth() + sum(c.held_count() for c in t.channels.values()) for t in self.topics.values())
        if left:
            self.logger.info(f"NSQ: drained - {left} deferred, paused or unsubscribed messages left for the next start")
        else:
            self.logger.info("NSQ: drained")
        self.request_stop()

    # ---- health -------------------------------------------------------------------------------

    def set_health(self, err: Exception | None) -> None:
        self._health_error = None if err is None else str(err)

    def is_healthy(self) -> bool:
        return self._health_error is None

    def health(self) -> str:
        return "OK" if self._health_error is None else f"NOK - {self._health_error}"

    # ---- clients ------------------------------------------------------------------------------

    def new_client_id(self) -> int:
        self._next_client_id += 1
        return self._next_client_id

    def add_client(self, client_id: int, client: Client) -> None:
        self.clients[client_id] = client

    def remove_client(self, client_id: int) -> None:
        self.clients.pop(client_id, None)

    # ---- topics -------------------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic:
        """The topic, created (and persisted, and announced) on first use."""
        topic = self.topics.get(name)
        if topic is not None:
            self.metadata_file.settle(name)
            return topic
        if self.exiting:
            raise ExitingError()
        topic = Topic(name, self)
        self.topics[name] = topic
        self.logger.info(f"TOPIC({name}): created")
        if not self._loading:
            self._announce("topic_created", topic, None)
        return topic

    def get_existing_topic(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def delete_existing_topic(self, name: str) -> bool:
        """Delete a topic with its channels and files; False when there is no such topic."""
        topic = self.topics.get(name)
        if topic is None:
            return False
        self.replays.stop_topic(name, forget=True)
        topic.close(delete=True)
        self.topics.pop(name, None)
        self._announce("topic_deleted", topic, None)
        return True

    def on_channel_created(self, topic: Topic, channel: Channel) -> None:
        if not self._loading:
            self._announce("channel_created", topic, channel)

    def on_channel_deleted(self, topic: Topic, channel: Channel) -> None:
        self.replays.stop(topic.name, channel.name, forget=True)
        self._announce("channel_deleted", topic, channel)

    def _announce(self, event: str, topic: Topic, channel: Channel | None) -> None:
        """Wait until nsqd.dat covers the change (ephemeral ones aside), then tell the listeners (lookupd)."""
        ephemeral = topic.ephemeral or (channel is not None and channel.ephemeral)
        if not ephemeral and not self.exiting:
            self.metadata_file.changed(topic.name)
        for listener in self.listeners:
            listener(event, topic, channel)

    def new_backend(self, name: str, ephemeral: bool,
                    before_sync: Callable[[], None] | None = None) -> BackendQueue:
        if ephemeral:
            return DummyBackend()
        opts = self.opts
        if self._data_files is None:
            self._data_files = data_files_by_queue(self.data_path)
        return DiskQueue(
            name, self.data_path, opts.max_bytes_per_file, MIN_VALID_MSG_LENGTH,
            MIN_VALID_MSG_LENGTH + opts.max_msg_size, opts.sync_every, opts.sync_timeout,
            self.logger, before_sync=before_sync, acks=self.acks if self.acks.durable else None,
            data_files=self._data_files.pop(name, []),
        )

    def retained_log(self, name: str) -> RetainedLog:
        """Topic ``name``'s retained log, with the segments on disk (the data dir is listed for them the first time
        a topic has retention: without, nsqd lists it once, as before)."""
        if self._retained_files is None:
            self._retained_files = retained_files_by_topic(self.data_path)
        files = self._retained_files.pop(name, [])
        opts = self.opts
        return RetainedLog(name, self.data_path, opts.max_bytes_per_file, MIN_VALID_MSG_LENGTH,
                           MIN_VALID_MSG_LENGTH + opts.max_msg_size, self.acks, self.logger, files)

    # ---- metadata (nsqd.dat) ------------------------------------------------------------------

    @property
    def metadata_path(self) -> str:
        return self.metadata_file.path

    def persist_metadata(self) -> None:
        """Write nsqd.dat now, whole (start-up and exit); OSError on failure."""
        self.metadata_file.write_now()

    def load_metadata(self) -> None:
        """Recreate the topics and channels of nsqd.dat (paused flags included)."""
        path = self.metadata_path
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        except OSError as err:
            raise StartupError(f"failed to read channel metadata from {path} - {err}") from None
        try:
            meta = orjson.loads(data)
            topics = meta.get("topics") or []
        except (orjson.JSONDecodeError, AttributeError) as err:
            raise StartupError(f"failed to parse metadata in {path} - {err}") from None
        self._loading = True
        try:
            for entry, name in self._valid_entries(topics, "topic"):
                topic = self.get_topic(name)
                if entry.get("paused"):
                    topic.pause()
                topic.settings.load(entry.get("settings"), self._stored_setting_warning(name))
                for chan, cname in self._valid_entries(entry.get("channels") or [], "channel"):
                    channel = topic.get_channel(cname)
                    if chan.get("paused"):
                        channel.pause()
                    channel.settings.load(chan.get("settings"), self._stored_setting_warning(f"{name}:{cname}"))
                topic.settings_changed()
        finally:
            self._loading = False
        self.replays.resume(self.topics.values())

    def _stored_setting_warning(self, queue: str) -> Callable[[str], None]:
        return lambda text: self.logger.warn(f"NSQ: {queue}: {text}")

    def _valid_entries(self, entries: list, kind: str) -> Iterator[tuple[dict, str]]:
        """nsqd.dat entries with a valid name; the others are skipped with nsqd's warning."""
        for entry in entries:
            name = entry.get("name", "") if isinstance(entry, dict) else ""
            if isinstance(name, str) and is_valid_name(name):
                yield entry, name
            else:
                self.logger.warn(f"skipping creation of invalid {kind} {name}")

    # ---- queue scan ---------------------------------------------------------------------------

    def _all_channels(self) -> list[Channel]:
        return [c for t in self.topics.values() for c in t.channels.values()]

    def _queue_scan_loop(self) -> None:
        """Like nsqd's queueScanLoop: sample channels, process timeouts; rescan at once when busy."""
        selection = max(1, self.opts.queue_scan_selection_count)
        interval = self.opts.queue_scan_interval / 1e9
        dirty_ratio = self.opts.queue_scan_dirty_percent
        while True:
            gevent.sleep(interval)
            while True:
                channels = self._all_channels()
                if len(channels) > selection:
                    channels = random.sample(channels, selection)
                if not channels:
                    break
                now = time.monotonic()
                dirty = 0
                for channel in channels:
                    try:
                        in_flight = channel.process_in_flight(now)
                        deferred = channel.process_deferred(now)
                    except Exception as err:  # one broken channel must not stop timeouts for all
                        self.logger.error(f"QUEUESCAN: channel {channel.name} - {err!r}")
                        continue
                    if in_flight or deferred:
                        dirty += 1
                if dirty <= dirty_ratio * len(channels):
                    break
                gevent.sleep(0)
