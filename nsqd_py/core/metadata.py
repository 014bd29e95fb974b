"""nsqd.dat written by group commit: a create, delete or (un)pause answers after one write that covers it.

Go nsqd rewrites the whole file (JSON, fsync, rename) once per change, under its lock, so creating n topics
costs O(n²) and every other connection waits. Here the changes that arrive while a write is under way share
the next one, the fsync runs on a disk thread while the loop keeps serving, and each topic's JSON is kept
between writes, so a write re-encodes only the topics that changed. The bytes are those Go writes: topics in
creation order, `"channels":null` for a topic without any, `"topics":null` for none.

Until the write that covers a change lands, its topic is *unsettled*: a publisher or subscriber that finds
it waits too (`settle`), so nothing is acknowledged in a topic or channel that kill -9 would forget. A write that
fails fails the changes and settles waiting for it (BackendError: the publish is refused), makes nsqd unhealthy
and is tried again a second later; the topics stay unsettled until a write covering them lands.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import gevent
import orjson
from gevent.event import Event

from ..runtime.disk_threads import run_blocking
from ..runtime.log import Logger
from ..runtime.version import NSQ_VERSION
from .disk.persist import replace_file
from .errors import BackendError

#: how long after a failed write the next one is tried
RETRY_SECONDS = 1.0

if TYPE_CHECKING:
    from .topic import Topic


def topic_entry(topic: Topic) -> dict:
    """One topic of nsqd.dat, with its non-ephemeral channels (None when there are none, as Go writes it).
    A topic or channel with controls beyond nsqd set has a `"settings"` key too, which Go nsqd ignores."""
    channels = [_with_settings({"name": c.name, "paused": c.paused}, c.settings.stored())
                for c in topic.channels.values() if not c.ephemeral]
    return _with_settings({"name": topic.name, "paused": topic.paused, "channels": channels or None},
                          topic.settings.stored())


def _with_settings(entry: dict, stored: dict | None) -> dict:
    if stored is not None:
        entry["settings"] = stored
    return entry


def document(entries: Iterable[bytes]) -> bytes:
    """nsqd.dat's bytes from the topics' encoded entries."""
    joined = b",".join(entries)
    topics = b"[" + joined + b"]" if joined else b"null"
    return b'{"topics":' + topics + b',"version":' + orjson.dumps(NSQ_VERSION) + b"}"


class MetadataFile:
    """nsqd.dat of one data directory; ``topics`` is the broker's live topic map."""

    def __init__(self, path: str, topics: Callable[[], dict[str, Topic]], logger: Logger,
                 health: Callable[[Exception | None], None]) -> None:
        self.path = path
        self._topics = topics
        self._logger = logger
        self._health = health  # told of a failed write, and of the write that lands after it
        #: each non-ephemeral topic's encoded entry, in creation order
        self._entries: dict[str, bytes] = {}
        #: topics changed since their entry was encoded
        self._dirty: set[str] = set()
        #: the round each unsettled topic waits for
        self._unsettled: dict[str, int] = {}
        self._requested = 0
        self._written = 0
        self._round_done = Event()
        self._writer: gevent.Greenlet | None = None
        #: the last write that failed: the round it covered and why (None once a write landed)
        self._failure: tuple[int, str] | None = None

    def write_now(self) -> None:
        """Write the whole file from scratch (start-up, exit), after a write under way; OSError on failure."""
        if self._writer is not None:
            self._writer.join()
        self._dirty.clear()
        self._entries = {name: orjson.dumps(topic_entry(topic)) for name, topic in self._topics().items()
                         if not topic.ephemeral}
        self._logger.info(f"NSQ: persisting topic/channel metadata to {self.path}")
        replace_file(self.path, document(self._entries.values()), sync_dir=True)

    def changed(self, topic_name: str) -> None:
        """Record a change to a topic (created, deleted, paused, a channel's the same) and wait for the write
        that covers it; BackendError when that write failed (the change stays in memory, and is written later)."""
        self._dirty.add(topic_name)
        self._requested += 1
        round_ = self._requested
        self._unsettled[topic_name] = round_
        if self._writer is None:
            self._writer = gevent.spawn(self._write_rounds)
        self._wait_for(round_)

    def settle(self, topic_name: str) -> None:
        """Wait until the topic's last change is on disk (at once when it is); BackendError as changed()."""
        round_ = self._unsettled.get(topic_name)
        if round_ is not None:
            self._wait_for(round_)

    def is_settled(self, topic_name: str) -> bool:
        """Whether settle() would return at once."""
        return topic_name not in self._unsettled

    def _wait_for(self, round_: int) -> None:
        while self._written < round_:
            self._round_done.wait()
            failure = self._failure
            if failure is not None and failure[0] >= round_ > self._written:
                raise BackendError(f"failed to persist metadata - {failure[1]}")

    def _write_rounds(self) -> None:
        try:
            while self._written < self._requested:
                round_ = self._requested
                data = self._encode()
                self._logger.info(f"NSQ: persisting topic/channel metadata to {self.path}")
                try:
                    run_blocking(replace_file, self.path, data, True)
                except OSError as err:
                    self._logger.error(f"failed to persist metadata - {err}")
                    self._failure = (round_, str(err))
                    self._health(err)
                    self._wake()
                    gevent.sleep(RETRY_SECONDS)
                    continue
                if self._failure is not None:
                    self._failure = None
                    self._health(None)
                self._finish(round_)
        finally:
            self._writer = None

    def _encode(self) -> bytes:
        topics = self._topics()
        for name in self._dirty:
            topic = topics.get(name)
            if topic is None or topic.ephemeral:
                self._entries.pop(name, None)
            else:
                self._entries[name] = orjson.dumps(topic_entry(topic))
        self._dirty.clear()
        return document(self._entries.values())

    def _finish(self, round_: int) -> None:
        self._written = round_
        self._unsettled = {name: r for name, r in self._unsettled.items() if r > round_}
        self._wake()

    def _wake(self) -> None:
        done, self._round_done = self._round_done, Event()
        done.set()
