"""DeferredStore: a channel's deferred messages with the time each is due, on disk (beyond nsqd: --persist-deferred).

Go nsqd keeps a deferral only in memory: a DPUB or ``REQ <delay>`` that reaches a disk queue, a restart or a crash
loses its time (nsqio/nsq#1107, #1375). The store keeps each deferred message and its due time in files of its own
beside the channel's disk queue, which Go nsqd never opens, so the disk queue itself stays go-diskqueue's:

* ``NAME.deferred.GGGGGG.log``: entries appended as messages are deferred (``D``) and leave the store (``X``);
* ``NAME.deferred.GGGGGG.base``: the entries alive when log GGGGGG began, written by a compaction.

An entry is ``[uint32 BE length][uint32 BE crc32][kind][payload]``, length and crc covering kind and payload; ``D``'s
payload is the due time (int64 BE, Unix ns) and the message's disk-queue record, ``X``'s the message id. A load reads
the newest base and every log from its generation on, stops at a torn or corrupt entry (a crash mid-append), and
appends to a new log. With ``--sync-every=1`` an entry joins a group commit round of the acks (acks.py) like a disk
queue's record, so an OK to a DPUB means the deferred copy is on disk.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import zlib
from collections.abc import Callable

import gevent

from nsqd_py.runtime.disk_threads import run_blocking
from nsqd_py.runtime.log import Logger

from ..errors import BackendError
from .acks import Acks
from .appended_files import AppendedFiles
from .persist import replace_file

__all__ = ["DeferredStore"]

_HEAD = struct.Struct(">II")
_DUE = struct.Struct(">q")
_DEFER = b"D"
_REMOVE = b"X"
_ID_LENGTH = 16
#: a compaction runs once this many entries are dead, and at least as many as are alive, or once a load found more
#: files than this (each start begins a log)
_COMPACT_AFTER = 4096
_MAX_FILES = 8


def _entry(kind: bytes, payload: bytes) -> bytes:
    body = kind + payload
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


def defer_entry(due_ns: int, record: bytes) -> bytes:
    return _entry(_DEFER, _DUE.pack(due_ns) + record)


def remove_entry(msg_id: bytes) -> bytes:
    return _entry(_REMOVE, msg_id)


def parse_entries(data: bytes, live: dict[bytes, tuple[int, bytes]]) -> tuple[int, str | None]:
    """Apply a file's entries to ``live`` (id -> due time, record): how many there were, and why reading stopped
    early (None: at the end of the file)."""
    view = memoryview(data)
    pos = count = 0
    end = len(data)
    while pos < end:
        if pos + _HEAD.size > end:
            return count, f"torn entry at {pos}"
        size, crc = _HEAD.unpack_from(view, pos)
        start = pos + _HEAD.size
        if size < 1 or start + size > end:
            return count, f"torn entry at {pos}"
        body = bytes(view[start:start + size])
        if zlib.crc32(body) != crc:
            return count, f"corrupt entry at {pos}"
        kind = body[:1]
        if kind == _DEFER and size > 1 + _DUE.size + 10 + _ID_LENGTH:
            record = body[1 + _DUE.size:]
            live[record[10:10 + _ID_LENGTH]] = (_DUE.unpack_from(body, 1)[0], record)
        elif kind == _REMOVE and size == 1 + _ID_LENGTH:
            live.pop(body[1:], None)
        else:
            return count, f"unknown entry at {pos}"
        count += 1
        pos = start + size
    return count, None


class DeferredStore(AppendedFiles):
    """The deferred messages of one channel, on disk; the channel keeps them in memory as well and tells the store
    when one is deferred (:meth:`add`) and when it leaves (:meth:`remove`). A compaction leaves the log it ends to
    the next sync (AppendedFiles)."""

    def __init__(self, name: str, data_path: str, logger: Logger, acks: Acks) -> None:
        super().__init__(f"DEFERRED({name})", f"deferred store {name}", data_path, logger)
        self.name = name
        self._prefix = os.path.join(data_path, f"{name}.deferred.")
        self._acks = acks
        self._generation = 0
        self._live = 0
        self._dead = 0
        self._files = 0
        self._compacting = False
        self._floor = 0  # the first generation after the last clear(): an older base must not come back
        self._after_rounds: dict[object, list[Callable[[], None]]] = {}

    # ---- files ------------------------------------------------------------------------------

    def _path(self, generation: int, kind: str) -> str:
        return f"{self._prefix}{generation:06d}.{kind}"

    def _generations(self) -> tuple[set[int], set[int]]:
        """The generations of the bases and of the logs on disk."""
        pattern = re.compile(re.escape(os.path.basename(self._prefix)) + r"(\d+)\.(base|log)")
        bases: set[int] = set()
        logs: set[int] = set()
        for entry in os.listdir(self._data_path):
            found = pattern.fullmatch(entry)
            if found:
                (bases if found.group(2) == "base" else logs).add(int(found.group(1)))
        return bases, logs

    def load(self) -> list[tuple[int, bytes]]:
        """The deferred messages on disk (due time in Unix ns, record), in the order they were deferred; opens a new
        log for what comes next. OSError when the files cannot be read."""
        bases, logs = self._generations()
        first = max(bases) if bases else min(logs, default=0)
        live: dict[bytes, tuple[int, bytes]] = {}
        files = ([self._path(first, "base")] if first in bases else []) + \
            [self._path(g, "log") for g in sorted(logs) if g >= first]
        entries = 0
        for path in files:
            with open(path, "rb") as f:
                count, stopped = parse_entries(f.read(), live)
            entries += count
            if stopped is not None:
                self._log.warn(f"{self._log_name}: {path}: {stopped}, the rest of the file is skipped")
        for generation in bases | logs:
            if generation < first:
                self._unlink(self._path(generation, "base"))
                self._unlink(self._path(generation, "log"))
        self._unlink(self._path(first, "base") + ".tmp")
        self._generation = max(bases | logs, default=0) + 1
        self._open_log()
        self._live = len(live)
        self._dead = entries - len(live)
        self._files = len(files)
        if live:
            self._log.info(f"{self._log_name}: {len(live)} deferred messages loaded")
        return list(live.values())

    def _open_log(self) -> None:
        self._fd = os.open(self._path(self._generation, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._dir_dirty = True

    def _unlink(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def _append(self, entry: bytes) -> None:
        if self._closed or self._fd is None:
            raise BackendError(f"deferred store {self.name} is closed")
        try:
            written = 0
            while written < len(entry):
                written += os.write(self._fd, entry[written:])
        except OSError as err:
            raise BackendError(f"failed to write to deferred store {self.name} - {err}") from err

    # ---- entries ------------------------------------------------------------------------------

    def add(self, due_ns: int, record: bytes) -> None:
        """A message deferred until ``due_ns`` (Unix ns); BackendError when it could not be written."""
        self._append(defer_entry(due_ns, record))
        self._live += 1
        if self._acks.durable:
            self._acks.written(self)

    def remove(self, msg_id: bytes) -> None:
        """A deferred message left (due, emptied, or moved on); written lazily: a crash before it is on disk only
        brings the message back, once more."""
        with contextlib.suppress(BackendError):
            self._append(remove_entry(msg_id))
        self._live -= 1
        self._dead += 2

    def needs_compaction(self) -> bool:
        return not self._compacting and (self._files > _MAX_FILES or self._dead >= max(_COMPACT_AFTER, self._live))

    def compact(self, live: list[tuple[int, bytes]]) -> None:
        """Rewrite the store as ``live`` (every message deferred now: due time, record), in a disk thread; entries
        added meanwhile go to a new log that the new base comes before."""
        if self._compacting or self._closed:
            return
        self._compacting = True
        old_fd = self._retire_fd()
        self._generation += 1
        generation = self._generation
        self._open_log()
        self._live = len(live)
        self._dead = self._files = 0
        data = b"".join(defer_entry(due, record) for due, record in live)
        gevent.spawn(self._write_base, generation, data, old_fd)

    def _write_base(self, generation: int, data: bytes, old_fd: int | None) -> None:
        try:
            run_blocking(self._replace_base, generation, data)
            if generation < self._floor:  # emptied meanwhile: this base holds what is gone
                self._unlink(self._path(generation, "base"))
            if old_fd in self._unsynced_fds:  # the base holds what it did (a sync under way closes it instead)
                self._unsynced_fds.remove(old_fd)
                os.close(old_fd)
        except OSError as err:
            self._log.error(f"{self._log_name}: compaction failed - {err}")
        finally:
            self._compacting = False

    def _replace_base(self, generation: int, data: bytes) -> None:
        """On a disk thread: write the base whole, rename it into place, make the rename durable, and only then
        remove the older files (a crash before that leaves them, and a load starts from the older base)."""
        if generation < self._floor:
            return
        replace_file(self._path(generation, "base"), data, sync_dir=True)
        bases, logs = self._generations()
        for older in bases | logs:
            if older < generation:
                self._unlink(self._path(older, "base"))
                self._unlink(self._path(older, "log"))

    # ---- durability ---------------------------------------------------------------------------

    def when_durable(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once every entry written so far is on disk: at once unless --sync-every=1 has a round
        pending for them; never, when that round fails (what it would release stays where it was)."""
        commits = self.commits
        pending = commits.covering() if commits is not None else None
        if pending is None:
            callback()
            return
        waiting = self._after_rounds.get(pending)
        if waiting is None:
            waiting = self._after_rounds[pending] = []
            gevent.spawn(self._after_round, pending, waiting)
        waiting.append(callback)

    def _after_round(self, pending: object, waiting: list[Callable[[], None]]) -> None:
        pending.done.wait()  # type: ignore[attr-defined]
        del self._after_rounds[pending]
        if pending.error is None:  # type: ignore[attr-defined]
            for callback in waiting:
                callback()

    # ---- whole store --------------------------------------------------------------------------

    def clear(self) -> None:
        """Forget every message (the channel was emptied): the files go, a new log begins."""
        self._remove_files()
        self._generation += 1
        self._floor = self._generation
        self._open_log()
        self._live = self._dead = 0

    def close(self) -> None:
        """Sync and close (the channel is closing; its deferred messages stay here for the next start)."""
        if self._closed:
            return
        self.sync()
        self._closed = True
        self._close_files()

    def delete(self) -> None:
        """Close and remove every file (the channel was deleted)."""
        self._remove_files()
        self._closed = True

    def _remove_files(self) -> None:
        self._close_files()
        bases, logs = self._generations()
        for generation in bases:
            self._unlink(self._path(generation, "base"))
        for generation in logs:
            self._unlink(self._path(generation, "log"))

