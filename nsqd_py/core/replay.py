"""Replays (beyond nsqd): a channel fed its topic's retained log from a point, at the backlog-consume rate.

A replay covers the log from its start up to the log's tail when it began, less the topic's own backlog (which the
channel gets from the topic); what is published later reaches the channel as any publish does, so nothing comes
twice. A greenlet reads the segments in batches of about
``BATCH_BYTES`` and hands each batch to the channel (`put_parked_batch`, ids and timestamps as published, attempts
0) whenever the channel has fewer than ``LOW_WATER`` messages queued, so the replay goes as fast as consumers take
it and the channel holds a batch or two, in memory at the default `--mem-queue-size`. The log keeps every segment a
replay still reads (RetainedLog.pin).

After each batch the replay's cursor is written to ``TOPIC.retained.replay.CHANNEL.dat`` (at `--sync-every=1` once
the batch is on the channel's disk queue when that is where it went - at `--mem-queue-size=0` - and fsynced): a
restart resumes from it. A clean shutdown flushes the channel's memory to its disk queue, so it resumes exactly;
after a crash at the durable settings, at most the one batch whose cursor had not been written comes again; at the
others the channel's memory is lost as any is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gevent

from ..runtime.disk_threads import run_blocking
from .disk.appended_files import sync_files
from .disk.retained_log import Position, RetainedLog
from .errors import BackendError
from .message import Parked

if TYPE_CHECKING:
    from .channel import Channel
    from .nsqd import NSQD
    from .topic import Topic

__all__ = ["EARLIEST", "LATEST", "Replays", "Start"]

#: a channel is fed while it has fewer queued messages than this
LOW_WATER = 1024
#: about how many bytes of records one batch reads
BATCH_BYTES = 256 * 1024
#: how often a replay looks again at a channel that had enough queued: soon, then less often while it stays full
POLL_SECONDS = 0.002
MAX_POLL_SECONDS = 0.1
#: the points that are not a time
EARLIEST = "earliest"
LATEST = "latest"
_ZERO_ATTEMPTS = b"\x00\x00"


@dataclass(frozen=True, slots=True)
class Start:
    """Where a replay begins: ``pos`` in the log, up to ``end``; ``before_retained`` when the point asked for was
    older than the oldest retained message (it begins there)."""

    pos: Position
    end: Position
    before_retained: bool
    oldest: int | None  # the oldest retained message's timestamp, ns

    @property
    def messages(self) -> int:
        return self.end.seq - self.pos.seq


def resolve(log: RetainedLog, point: str | int, backlog: int) -> Start:
    """``point`` (EARLIEST, LATEST or a time in Unix ns) in the log as it is now, up to the ``backlog`` newest
    messages: the topic's own queue, which its channels get from the topic (a paused topic's, or one without
    channels until now), not from the log."""
    oldest = log.oldest_timestamp()
    tail = log.tail()
    if point == EARLIEST:
        pos, before = log.earliest(), False
    elif point == LATEST or not isinstance(point, int):
        pos, before = tail, False
    else:
        pos, before = log.at_time(point), oldest is not None and point < oldest
    end = log.at_seq(max(pos.seq, tail.seq - backlog)) if backlog and pos < tail else tail
    return Start(pos, end, before, oldest)


class _Replay:
    """One channel's replay: the greenlet and its cursor."""

    def __init__(self, nsqd: NSQD, log: RetainedLog, channel: Channel, pos: Position, end: Position,
                 path: str | None) -> None:
        self.nsqd = nsqd
        self.log = log
        self.channel = channel
        self.pos = pos
        self.end = end
        self.path = path  # None: an ephemeral channel, whose replay is not resumed
        self.stopping = False
        self.greenlet: gevent.Greenlet | None = None
        log.pin(channel.name, pos.seg)

    def save(self) -> None:
        """Write the cursor (fsynced at --sync-every=1)."""
        if self.path is None:
            return
        pos, end = self.pos, self.end
        text = f"{pos.seg},{pos.offset},{pos.seq}\n{end.seg},{end.offset},{end.seq}\n".encode()
        tmp = f"{self.path}.tmp"
        durable = self.nsqd.acks.durable
        try:
            run_blocking(_write_file, tmp, self.path, text, self.nsqd.data_path if durable else None)
        except OSError as err:
            self.nsqd.logger.error(f"CHANNEL({self.channel.name}): failed to save replay cursor - {err}")

    def run(self) -> None:
        channel, log, acks = self.channel, self.log, self.nsqd.acks
        wait = POLL_SECONDS
        while not self.stopping and not channel.exiting and self.pos < self.end:
            if channel.depth() >= LOW_WATER:
                gevent.sleep(wait)
                wait = min(wait * 2, MAX_POLL_SECONDS)  # nobody consuming: look less and less often
                continue
            wait = POLL_SECONDS
            try:
                records, after = log.read(self.pos, self.end, BATCH_BYTES)
            except (OSError, BackendError) as err:
                self.nsqd.logger.error(f"CHANNEL({channel.name}): replay stopped - {err}")
                return
            if not records:
                self.pos = self.end
                break
            fresh: list[Parked] = [r if r[8:10] == _ZERO_ATTEMPTS else r[:8] + _ZERO_ATTEMPTS + r[10:] for r in records]
            begun = acks.begin()
            channel.put_parked_batch(fresh)
            try:
                acks.settle(begun)
            except BackendError as err:
                self.nsqd.logger.error(f"CHANNEL({channel.name}): replay batch not on disk, retrying - {err}")
                gevent.sleep(1.0)
                continue
            channel.dispatch()
            self.pos = after
            log.pin(channel.name, after.seg)
            self.save()
        if self.pos >= self.end:
            self.nsqd.logger.info(f"CHANNEL({channel.name}): replay done")
            self.forget()

    def forget(self) -> None:
        """The replay is over (or called off): its pin and cursor go."""
        self.log.unpin(self.channel.name)
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        self.nsqd.replays.discard(self)


class Replays:
    """Every replay under way, by topic and channel name."""

    def __init__(self, nsqd: NSQD) -> None:
        self._nsqd = nsqd
        self._running: dict[tuple[str, str], _Replay] = {}

    def _path(self, topic: str, channel: str) -> str:
        return os.path.join(self._nsqd.data_path, f"{topic}.retained.replay.{channel}.dat")

    def start(self, topic: Topic, channel: Channel, start: Start) -> None:
        """Feed ``channel`` the log from ``start`` (the cursor is on disk when this returns)."""
        log = topic.retained
        if log is None or start.pos >= start.end:
            return
        path = None if channel.ephemeral else self._path(topic.name, channel.name)
        self._launch(_Replay(self._nsqd, log, channel, start.pos, start.end, path), save=True)

    def _launch(self, replay: _Replay, save: bool) -> None:
        self._running[(replay.log.name, replay.channel.name)] = replay
        if save:
            replay.save()
        replay.greenlet = gevent.spawn(replay.run)
        self._nsqd.logger.info(f"CHANNEL({replay.channel.name}): replaying {replay.end.seq - replay.pos.seq} "
                               "retained messages")

    def discard(self, replay: _Replay) -> None:
        key = (replay.log.name, replay.channel.name)
        if self._running.get(key) is replay:
            del self._running[key]

    def stop(self, topic: str, channel: str, forget: bool) -> None:
        """Stop the channel's replay after its batch under way; ``forget``: for good (its cursor goes)."""
        replay = self._running.get((topic, channel))
        if replay is None:
            if forget:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(topic, channel))
            return
        replay.stopping = True
        if replay.greenlet is not None:
            replay.greenlet.join(timeout=5)
            replay.greenlet.kill()  # a batch stuck past that must not save its cursor over a new replay's
        if forget:
            replay.forget()
        else:
            self.discard(replay)

    def stop_topic(self, topic: str, forget: bool) -> None:
        for topic_name, channel in [key for key in self._running if key[0] == topic]:
            self.stop(topic_name, channel, forget)

    def stop_all(self) -> None:
        """Stop every replay, keeping their cursors (nsqd is closing)."""
        for topic, channel in list(self._running):
            self.stop(topic, channel, forget=False)

    def resume(self, topics: Iterable[Topic]) -> None:
        """Go on with the replays whose cursors are on disk (start-up); a cursor of a channel that is gone goes."""
        by_name = {t.name: t for t in topics if t.retained is not None}
        for entry in os.listdir(self._nsqd.data_path):
            for name, topic in by_name.items():
                prefix = f"{name}.retained.replay."
                if not entry.startswith(prefix) or not entry.endswith(".dat"):
                    continue
                channel = topic.get_existing_channel(entry[len(prefix):-4])
                cursor = _read_cursor(os.path.join(self._nsqd.data_path, entry))
                log = topic.retained
                if channel is None or cursor is None or log is None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self._nsqd.data_path, entry))
                    continue
                tail = log.tail()
                pos, end = (_within(p, tail) for p in cursor)
                self._launch(_Replay(self._nsqd, log, channel, pos, end, self._path(name, channel.name)),
                             save=False)


def _within(pos: Position, tail: Position) -> Position:
    """A cursor past the log's end goes back to the end: a power loss cut records the replay had read before they
    were synced (so none was acknowledged), and what is appended there now is new, not the rest of an old record."""
    return tail if (pos.seg, pos.offset) > (tail.seg, tail.offset) else pos


def _read_cursor(path: str) -> tuple[Position, Position] | None:
    try:
        with open(path, "rb") as f:
            lines = f.read().decode().split()
        pos, end = (Position(*(int(v) for v in line.split(","))) for line in lines)
    except (OSError, ValueError, TypeError):
        return None
    return pos, end


def _write_file(tmp: str, path: str, data: bytes, sync_dir: str | None) -> None:
    """Write ``path`` whole through ``tmp`` and a rename (and make both durable when ``sync_dir`` is given)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        if sync_dir is not None:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir is not None:
        sync_files([], sync_dir)
