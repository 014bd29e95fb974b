"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

DiskQueue: a go-diskqueue (v1.1.0) compatible on-disk FIFO with acknowledged reads, for gevent.

The bytes are format.py's, reading and the positions reader.py's, start-up salvage.py's; this module writes
records and decides when they, and the positions, are synced. A queue syncs in one of three ways:

* :meth:`DiskQueue.sync_data`, a group commit round's (acks.py, ``--sync-every=1``): one fdatasync of the write
  file makes every record put so far durable; it is a full sync when that is not enough;
* :meth:`DiskQueue.sync`, a full sync: fsync the data files (and the directory for a new one), rewrite the meta
  file, release files the persisted read position has passed. The caller waits for it: a put with
  ``sync_every=1`` and no group commit, a roll without one, a topic making its channels' copies durable;
* later, in a greenlet of its own: a background sync when ``sync_every`` puts and acks are reached or an ack lets a
  file go, and the sync-timeout timer after any change. Their failures are only logged, as in Go.

``read_one``, ``ack``, ``depth`` and a put joining a group commit never yield to the gevent hub; ``sync``,
``empty``, ``close`` and ``delete`` do. Every fsync, meta rewrite and file removal runs in one trip to a disk
thread (runtime/disk_threads.py), so the event loop keeps serving while the disk works.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import gevent
from gevent.event import Event

from nsqd_py.runtime.disk_threads import run_blocking
from nsqd_py.runtime.log import Logger

from ..errors import BackendError
from .acks import Acks, QueueCommits
from .format import LENGTH, QueueFiles, meta_text
from .persist import persist
from .reader import DiskReader
from .salvage import resume

__all__ = ["DiskQueue"]

T = TypeVar("T")

#: a sync at least this slow is logged
SLOW_SYNC_SECONDS = 1.0


class DiskQueue(DiskReader):
    """A go-diskqueue compatible disk queue whose read position only passes records once they are acked."""

    def __init__(self, name: str, data_path: str, max_bytes_per_file: int, min_msg_size: int, max_msg_size: int,
                 sync_every: int, sync_timeout_ns: int, logger: Logger,
                 before_sync: Callable[[], None] | None = None, acks: Acks | None = None,
                 data_files: list[int] | None = None) -> None:
        """``data_files``: this queue's data file numbers from a listing of the data dir the caller took (None:
        the queue lists the directory itself when it has no meta file)."""
        super().__init__(QueueFiles(name, data_path, min_msg_size, max_msg_size), logger)
        self._max_bytes = max_bytes_per_file
        self._sync_every = max(1, sync_every)
        self._sync_timeout = sync_timeout_ns / 1e9
        self._before_sync = before_sync
        self._acks = acks  # durable acks: puts are made durable by its group commit rounds, not one by one
        #: this queue's group commit rounds (the acks keep them here, so they go with the queue)
        self.commits: QueueCommits | None = None

        self._wfd: int | None = None
        self._old_wfds: list[int] = []  # rolled-over write files, fsynced and closed by the next sync
        self._dir_dirty = False

        self._synced = -1  # _changes as of the last successful sync (-1: meta never written by us)
        self._count = 0  # puts + acks since the last sync
        self._puts = 0  # records put so far
        self._durable_puts = 0  # _puts as of the last fsync that returned, or of the last round that failed
        self._untrusted_puts = 0  # _puts when a sync last failed: not durable, whatever later syncs say
        self._meta_wfile = -1  # writeFileNum in the meta file we last wrote (-1: none yet)
        self._syncing: Event | None = None  # set while a sync (or empty/close) runs; it owns the descriptors then
        self._timer: gevent.Greenlet | None = None
        self._background: gevent.Greenlet | None = None  # a sync started by sync_every or an ack
        self._shut = False  # descriptors closed by close/delete (a sync queued behind them must not run)

        depth, self._rfile, self._rpos, self._wfile, self._wpos, changed = resume(self._files, logger, data_files)
        self._unread = depth
        self._unread_bytes = self._bytes_on_disk() - 4 * depth
        self._lowest = self._rfile
        if changed:
            self._changes += 1
        self._check_tail()

    def _bytes_on_disk(self) -> int:
        """The bytes from the read position to the write position, from the files' sizes (at start-up)."""
        if self._rfile == self._wfile:
            return max(0, self._wpos - self._rpos)
        total = self._wpos - self._rpos
        for file_num in range(self._rfile, self._wfile):
            with contextlib.suppress(OSError):  # a missing file: the reader will skip it
                total += os.stat(self._files.data_file(file_num)).st_size
        return max(0, total)

    # ---- writing --------------------------------------------------------------------------------

    def put(self, data: bytes) -> None:
        """Append one record; with sync_every=1 it is fsynced before this returns, or (with durable acks) by the
        next group commit round, which the publisher waits for. Raises BackendError."""
        self.put_many([data])

    def put_many(self, records: list[bytes]) -> None:
        """Append records in order, as `put` does each, with one write for the records that go to the same data
        file (an MPUB past the memory queue: a system call per record cost more than the rest of its path). A
        write that fails takes none of its records: the file is cut back to where they began, and the records
        of the writes before it stay. A record of a size out of bounds is refused, after the records before it
        were written and synced as `put` would have. Raises BackendError."""
        if self._closed:
            raise BackendError("exiting")
        parts: list[bytes] = []
        payload = 0
        at = self._wpos
        rolled = False
        refused: BackendError | None = None
        for data in records:
            size = len(data)
            if size < self._min_size or size > self._max_size:
                refused = BackendError(f"invalid message write size ({size}) minMsgSize={self._min_size} "
                                       f"maxMsgSize={self._max_size}")
                break
            if at > 0 and at + 4 + size > self._max_bytes:
                self._write(parts, payload)
                parts = []
                payload = 0
                self._roll()
                rolled = True
                at = 0
            parts.append(LENGTH.pack(size))
            parts.append(data)
            payload += size
            at += 4 + size
        if parts:
            self._write(parts, payload)
            self._written(rolled)
        if refused is not None:
            raise refused

    def _written(self, rolled: bool) -> None:
        """What a put does once its records are written: the sync its caller's OK waits for, or its schedule."""
        if self._acks is not None:
            self._acks.written(self)  # the publisher waits for the round that syncs this (and the roll)
        elif rolled or self._sync_every == 1:
            self.sync()  # the caller's OK must mean "on disk"; Go also returns a sync error at roll
        elif self._count >= self._sync_every:
            self._sync_soon()  # like Go, a failure of this periodic sync is only logged
        elif self._timer is None:
            self._arm_timer()

    def _write(self, parts: list[bytes], payload: int) -> None:
        """Write records (their length prefixes and bodies, in ``parts``) at the write position, in one call."""
        if not parts:
            return
        fd = self._wfd
        if fd is None:
            fd = self._open_write()
        data = b"".join(parts)
        total = len(data)
        try:
            written = os.pwrite(fd, data, self._wpos)
            while written < total:  # a regular file only writes short when something is wrong; finish or fail
                written += os.pwrite(fd, data[written:], self._wpos + written)
        except OSError as err:
            self._write_failed()
            raise BackendError(f"failed to write to {self._files.data_file(self._wfile)} - {err}") from err
        count = len(parts) // 2
        self._wpos += total
        self._unread += count
        self._unread_bytes += payload
        self._changes += count
        self._count += count
        self._puts += count

    def _open_write(self) -> int:
        path = self._files.data_file(self._wfile)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError as err:
            raise BackendError(f"failed to open {path} - {err}") from err
        self._log.info(f"DISKQUEUE({self.name}): writeOne() opened {path}")
        if self._wpos == 0:
            self._dir_dirty = True
        self._wfd = fd
        return fd

    def _write_failed(self) -> None:
        """Drop a partial record (so the file never holds garbage past writePos) and reopen on the next put."""
        fd = self._wfd
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, self._wpos)
        self._old_wfds.append(fd)
        self._wfd = None

    def _roll(self) -> None:
        """Move writing to the next file; the old one is fsynced and closed by the sync that follows."""
        self._write_file_final()
        self._leave_write_file()
        self._changed()

    def _leave_write_file(self) -> None:
        if self._wfd is not None:
            self._old_wfds.append(self._wfd)
            self._wfd = None
        super()._leave_write_file()

    # ---- acknowledging ----------------------------------------------------------------------------

    def ack(self, token: object) -> None:
        """The record behind ``token`` is done with; unknown, repeated or pre-empty() tokens are ignored."""
        if not self._take_token(token):
            return
        self._changes += 1
        self._count += 1
        if self._persisted_read_file() != self._lowest or self._count >= self._sync_every:
            # like Go, sync when the read side leaves a file (which also removes the file); an ack that is
            # persisted late only means a duplicate after a crash, so the acking greenlet does not wait
            self._sync_soon()
        elif self._timer is None:
            self._arm_timer()

    # ---- syncing later ----------------------------------------------------------------------------

    def _changed(self) -> None:
        super()._changed()
        if self._timer is None:
            self._arm_timer()

    def _arm_timer(self) -> None:
        if not self._closed:
            self._timer = gevent.spawn_later(self._sync_timeout, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._closed and self._synced < self._changes:
            self._sync_logged()

    def _sync_soon(self) -> None:
        if self._background is None and not self._closed:
            self._background = gevent.spawn(self._background_sync)

    def _background_sync(self) -> None:
        try:
            self._sync_logged()
        finally:
            self._background = None

    def _sync_logged(self) -> None:
        try:
            self.sync()
        except BackendError as err:
            self._log.error(f"DISKQUEUE({self.name}) failed to sync - {err}")

    # ---- syncing now ------------------------------------------------------------------------------

    def sync(self) -> None:
        """fsync the data and rewrite the meta file, if anything changed since the last sync. Raises BackendError.

        Concurrent callers share one sync when it started after their change (group commit).
        """
        if self._closed:
            return
        target = self._changes
        while self._synced < target and not self._shut:
            if self._syncing is not None:
                self._syncing.wait()  # it may have covered our change; if not, one of the waiters starts the next
                continue
            with self._exclusive():
                # publishers that are ready to run write first, so one fsync round covers them all
                gevent.sleep(0)
                self._sync_now()

    def sync_data(self) -> None:
        """Make every record put so far durable, the cheap way when it is enough: one fdatasync of the write file.

        A crash then leaves records past the meta file's writePos, which Go nsqd and we both read back (the write
        file is read to its real end). That holds only while the meta file names the current write file and its
        directory entry is durable, so after a roll, a new file or before our first meta write this is a full sync.
        The meta file itself catches up with the next full sync (sync-timeout timer, acks, close). Raises
        BackendError.
        """
        target = self._puts
        try:
            while self._durable_puts < target and not self._shut and not self._closed:
                if self._syncing is not None:
                    self._syncing.wait()
                    continue
                if self._durable_puts < self._untrusted_puts:
                    raise BackendError(f"a sync of {self.name}'s data file failed after these messages were "
                                       f"written")
                if self._meta_wfile != self._wfile or self._old_wfds or self._dir_dirty or self._wfd is None:
                    self.sync()
                    continue
                with self._exclusive():
                    puts, fd = self._puts, self._wfd
                    try:
                        self._timed(os.fdatasync, fd)
                    except OSError as err:
                        failed = self._files.data_file(self._wfile)
                        self._sync_failed()
                        raise BackendError(f"failed to sync {failed} - {err}") from err
                    self._durable_puts = max(self._durable_puts, puts)
        except BackendError:
            # the records up to target are this round's (or earlier rounds'): this error answers their publishers
            self._durable_puts = max(self._durable_puts, target)
            raise
        if self._timer is None and self._synced < self._changes:
            self._arm_timer()

    def _timed(self, func: Callable[..., T], *args: object) -> T:
        """Run a sync on a disk thread; one that takes long is logged, as publishers at --sync-every=1 wait for it."""
        started = time.monotonic()
        try:
            return run_blocking(func, *args)
        finally:
            took = time.monotonic() - started
            if took >= SLOW_SYNC_SECONDS:
                self._log.warn(f"DISKQUEUE({self.name}): a sync took {took:.1f}s (slow disk)")

    def _sync_failed(self) -> None:
        """After a failed fsync the kernel may have dropped the dirty pages it could not write and marked them clean,
        so a later fsync that succeeds proves nothing about them ("fsyncgate"). Every record put so far that was not
        durable before is given up on (the publishers waiting for them get an error, now or at the next round) and
        writing moves on to a new file: a crash may leave holes in this one's unsynced tail, and a reader stops at a
        hole and sets the rest of its file aside as .bad, which must not hold anything acknowledged."""
        self._untrusted_puts = self._puts
        if self._wpos > 0:
            self._roll()

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Run a sync, empty or close alone; everyone waiting for it wakes at once when it ends."""
        while self._syncing is not None:
            self._syncing.wait()
        done = self._syncing = Event()
        try:
            yield
        finally:
            self._syncing = None
            done.set()

    def _sync_now(self) -> None:
        """Snapshot the positions, let before_sync make dependants durable, then persist the snapshot (exclusively).

        The snapshot comes first: whatever the caller's before_sync covers was handed over before it, so the
        persisted read position never passes a record that is not durable elsewhere. Records written while the
        fsync runs are simply not named by this meta file yet.
        """
        changes, puts, wfile = self._changes, self._puts, self._wfile
        self._count = 0
        pfile, ppos, depth = self._persisted_read()
        meta = meta_text(depth, pfile, ppos, self._wfile, self._wpos)
        closing = self._old_wfds
        self._old_wfds = []
        fsync_fds = [*closing, self._wfd] if self._wfd is not None else closing
        dir_dirty, self._dir_dirty = self._dir_dirty, False
        files = self._files
        release = [(files.data_file(n), files.data_file(n) + ".bad" if n in self._bad else None)
                   for n in range(self._lowest, pfile)]
        try:
            if self._before_sync is not None:
                self._before_sync()
            errors = self._timed(persist, fsync_fds, files.data_path if dir_dirty else None, files.meta_path, meta,
                                  release)
        except BaseException as err:
            # keep the old write files for the next attempt: closing them now would leave them unsynced
            self._old_wfds[:0] = closing
            self._dir_dirty = self._dir_dirty or dir_dirty
            if self._timer is None:
                self._arm_timer()  # retry later even if nothing else changes
            if isinstance(err, OSError):
                self._sync_failed()
                raise BackendError(str(err)) from err
            raise
        for fd in closing:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._synced = changes
        self._durable_puts = max(self._durable_puts, puts)
        self._meta_wfile = wfile
        if pfile > self._lowest:
            self._bad.difference_update(range(self._lowest, pfile))
            self._lowest = pfile
        for error in errors:
            self._log.error(f"DISKQUEUE({self.name}) {error}")

    # ---- empty / close / delete -------------------------------------------------------------------

    def _close_files(self) -> None:
        """Close every descriptor; only called while no sync runs (a sync may be using them otherwise)."""
        for fd in (self._rfd, self._wfd, *self._old_wfds):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._rfd = self._wfd = None
        self._old_wfds = []
        self._buf = b""

    def _remove_files(self, keep_bad: bool) -> None:
        for num in range(self._lowest, self._wfile + 1):
            path = self._files.data_file(num)
            try:
                if keep_bad and num in self._bad:
                    os.replace(path, path + ".bad")
                else:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                self._log.error(f"DISKQUEUE({self.name}) failed to remove data file - {err}")

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.kill(block=False)
            self._timer = None

    def empty(self) -> None:
        """Drop every record; numbering continues at writeFileNum+1 and outstanding tokens become no-ops."""
        if self._closed:
            raise BackendError("exiting")
        self._log.info(f"DISKQUEUE({self.name}): emptying")
        with self._exclusive():
            self._close_files()
            self._remove_files(keep_bad=True)
            self._wfile += 1
            self._wpos = 0
            self._rfile, self._rpos = self._wfile, 0
            self._lowest = self._wfile
            self._unread = 0
            self._unread_bytes = 0
            self._forget_pending()
            self._bad.clear()
            self._changes += 1
            self._sync_now()

    def close(self) -> None:
        """Sync and close; the files stay for the next start. Failures are logged, not raised."""
        if self._closed:
            return
        self._closed = True
        self._log.info(f"DISKQUEUE({self.name}): closing")
        self._stop_timer()
        with self._exclusive():
            try:
                if self._synced < self._changes:
                    self._sync_now()
            except BackendError as err:
                self._log.error(f"DISKQUEUE({self.name}) failed to sync - {err}")
            finally:
                self._close_files()
                self._shut = True

    def delete(self) -> None:
        """Close and remove every data file and the meta file of this queue."""
        if self._closed:
            return
        self._closed = True
        self._log.info(f"DISKQUEUE({self.name}): deleting")
        self._stop_timer()
        with self._exclusive():
            self._close_files()
            self._shut = True
            self._remove_files(keep_bad=False)
            try:
                os.unlink(self._files.meta_path)
            except FileNotFoundError:
                pass
            except OSError as err:
                self._log.error(f"DISKQUEUE({self.name}) failed to remove metadata file - {err}")
