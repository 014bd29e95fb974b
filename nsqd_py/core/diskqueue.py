"""A go-diskqueue (v1.1.0) compatible on-disk FIFO, with acknowledged reads, for gevent.

Files are byte-for-byte what Go nsqd writes and reads: ``<name>.diskqueue.NNNNNN.dat`` holding records
``[int32 BE length][data]`` and ``<name>.diskqueue.meta.dat`` holding ``depth\\nreadFileNum,readPos\\nwriteFileNum,
writePos\\n``. Unlike Go, a record handed out by :meth:`DiskQueue.read_one` stays on disk (and before the persisted
read position) until it is acked, so a crash redelivers it instead of losing it.

Positions are ``(file number, byte offset)``. Three of them matter:

* the write position, where the next record goes;
* the read cursor, the next record :meth:`DiskQueue.read_one` returns (memory only);
* the persisted read position, the oldest record handed out and not acked yet (or the read cursor when everything
  handed out is acked). The meta file stores this one, so Go or we redeliver what was in flight.

``read_one``, ``ack`` and ``depth`` never yield to the gevent hub. ``sync``, ``empty``, ``close`` and ``delete`` do,
and so does ``put`` when it waits for its fsync (sync_every=1 without a group commit, or a file roll); with a
:class:`GroupCommit` a put only joins the next group round, which the publisher waits for. Other syncs (sync_every,
acks, the sync-timeout timer) run in a background greenlet. All fsyncs, the meta rewrite and file removals run in one
trip to a disk thread (runtime/disk_threads.py), so the event loop keeps serving while the disk works.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator

import gevent
from gevent.event import Event

from nsqd_py.runtime.disk_threads import run_blocking
from nsqd_py.runtime.log import Logger

from .errors import BackendError
from .group_commit import GroupCommit

__all__ = ["DiskQueue", "DummyBackend"]

_LEN = struct.Struct(">i")
_READ_CHUNK = 64 * 1024
_META_RE = re.compile(rb"\s*([+-]?\d+)\s*\n\s*([+-]?\d+)\s*,\s*([+-]?\d+)\s*\n\s*([+-]?\d+)\s*,\s*([+-]?\d+)\s*")


class _Token:
    """A record handed out by read_one: its read sequence number and where it starts."""

    __slots__ = ("file_num", "pos", "seq")

    def __init__(self, seq: int, file_num: int, pos: int) -> None:
        self.seq = seq
        self.file_num = file_num
        self.pos = pos


class DummyBackend:
    """The backend of #ephemeral topics and channels: overflow is dropped and nothing touches the disk."""

    __slots__ = ()

    def put(self, data: bytes) -> None:
        pass

    def read_one(self) -> tuple[bytes, object] | None:
        return None

    def ack(self, token: object) -> None:
        pass

    def depth(self) -> int:
        return 0

    def sync(self) -> None:
        pass

    def empty(self) -> None:
        pass

    def delete(self) -> None:
        pass

    def close(self) -> None:
        pass


def _persist(fsync_fds: list[int], dir_path: str | None, meta_path: str, meta: bytes,
             release: list[tuple[str, str | None]]) -> list[str]:
    """The blocking part of a sync, run in a worker thread; returns errors from releasing files.

    Data files are fsynced before the meta file names their contents. Released files (the persisted read position
    has passed them) are removed, or renamed to ``.bad``, only after the new meta is in place.
    """
    for fd in fsync_fds:
        os.fsync(fd)
    if dir_path is not None:  # a new data file's directory entry must survive a crash too
        dir_fd = os.open(dir_path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    tmp = f"{meta_path}.{random.getrandbits(63)}.tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            written = 0
            while written < len(meta):
                written += os.write(fd, meta[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, meta_path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    errors = []
    for path, bad_path in release:
        try:
            if bad_path is None:
                os.unlink(path)
            else:
                os.replace(path, bad_path)
        except FileNotFoundError:
            pass  # a missing file was already reported when the reader skipped it
        except OSError as err:
            errors.append(f"failed to {'Remove' if bad_path is None else 'rename'}({path}) - {err}")
    return errors


class DiskQueue:
    """A go-diskqueue compatible disk queue whose read position only passes records once they are acked."""

    def __init__(self, name: str, data_path: str, max_bytes_per_file: int, min_msg_size: int, max_msg_size: int,
                 sync_every: int, sync_timeout_ns: int, logger: Logger,
                 before_sync: Callable[[], None] | None = None, group: GroupCommit | None = None) -> None:
        self.name = name
        self._data_path = data_path
        self._max_bytes = max_bytes_per_file
        self._min_size = min_msg_size
        self._max_size = max_msg_size
        self._sync_every = max(1, sync_every)
        self._sync_timeout = sync_timeout_ns / 1e9
        self._log = logger
        self._before_sync = before_sync
        self._group = group  # with sync_every=1: puts are made durable by its rounds, not one by one
        self._prefix = os.path.join(data_path, f"{name}.diskqueue.")
        self._meta_path = self._prefix + "meta.dat"

        self._wfile = self._wpos = 0
        self._rfile = self._rpos = 0
        self._unread = 0  # records between the read cursor and the write position
        self._pending: OrderedDict[int, _Token] = OrderedDict()  # handed out, not acked, in read order
        self._read_seq = 0  # sequence number of the next record handed out
        self._lowest = 0  # lowest file number that may still be on disk
        self._bad: set[int] = set()  # files with a bad record: renamed to .bad (not removed) once released

        self._wfd: int | None = None
        self._old_wfds: list[int] = []  # rolled-over write files, fsynced and closed by the next sync
        self._dir_dirty = False
        self._rfd: int | None = None
        self._rlimit = 0  # size of the open read file once it is finished (Go's maxBytesPerFileRead)
        self._buf = b""  # read-ahead of the read file, starting at file offset _buf_pos
        self._buf_pos = 0

        self._changes = 0  # bumped by every change the meta file should reflect
        self._synced = -1  # _changes as of the last successful sync (-1: meta never written by us)
        self._count = 0  # puts + acks since the last sync
        self._puts = 0  # records put so far
        self._durable_puts = 0  # _puts as of the last fsync that returned (data only or with the meta file)
        self._meta_wfile = -1  # writeFileNum in the meta file we last wrote (-1: none yet)
        self._syncing: Event | None = None  # set while a sync (or empty/close) runs; it owns the descriptors then
        self._timer: gevent.Greenlet | None = None
        self._background: gevent.Greenlet | None = None  # a sync started by sync_every or an ack
        self._closed = False  # no more puts, reads or syncs
        self._shut = False  # descriptors closed by close/delete (a sync queued behind them must not run)
        self._load()

    # ---- files ----------------------------------------------------------------------------------

    def _file_name(self, num: int) -> str:
        return f"{self._prefix}{num:06d}.dat"

    def _data_files(self) -> list[int]:
        pattern = re.compile(re.escape(f"{self.name}.diskqueue.") + r"(\d+)\.dat")
        found = []
        for entry in os.listdir(self._data_path):
            match = pattern.fullmatch(entry)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def _file_size(self, num: int) -> int | None:
        try:
            return os.stat(self._file_name(num)).st_size
        except FileNotFoundError:
            return None

    # ---- startup recovery -------------------------------------------------------------------------

    def _read_meta(self) -> tuple[int, int, int, int, int] | None:
        try:
            with open(self._meta_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as err:
            self._log.error(f"DISKQUEUE({self.name}) failed to retrieveMetaData - {err}")
            return None
        match = _META_RE.match(raw)
        if match is None:
            self._log.error(f"DISKQUEUE({self.name}) failed to retrieveMetaData - cannot parse {raw[:64]!r}")
            return None
        depth, rfile, rpos, wfile, wpos = (int(v) for v in match.groups())
        if min(rfile, rpos, wfile, wpos) < 0:
            self._log.error(f"DISKQUEUE({self.name}) failed to retrieveMetaData - negative position in {raw!r}")
            return None
        return depth, rfile, rpos, wfile, wpos

    def _load(self) -> None:
        """Resume from the meta file, salvaging what Go would not: data files without meta, unsynced tails."""
        meta = self._read_meta()
        depth: int | None
        salvaged: bool | None
        if meta is None:
            files = self._data_files()
            if not files:
                return
            self._log.warn(f"DISKQUEUE({self.name}) no metadata, salvaging data files {files[0]:06d}..{files[-1]:06d}"
                           f", writing continues at {files[-1] + 1:06d}")
            rfile, rpos, wfile, wpos = files[0], 0, files[-1] + 1, 0
            depth = salvaged = None
        else:
            depth, rfile, rpos, wfile, wpos = meta
            salvaged = False
            beyond = wfile
            while self._file_size(beyond + 1) is not None:
                beyond += 1
            size = self._file_size(wfile)
            if beyond > wfile:
                self._log.warn(f"DISKQUEUE({self.name}) data files after writeFileNum {wfile} up to {beyond}, "
                               f"salvaging them and skipping to new file")
                wfile, wpos, salvaged = beyond + 1, 0, True
            elif size is not None and size > wpos:
                # Go's own handling of an unclean stop: write to a new file, read the old one to its real end
                self._log.warn(f"DISKQUEUE({self.name}) {self._file_name(wfile)} metadata writePos {wpos} < file size "
                               f"of {size}, skipping to new file")
                wfile, wpos, salvaged = wfile + 1, 0, True
            elif wpos > (size or 0):
                self._log.error(f"DISKQUEUE({self.name}) {self._file_name(wfile)} metadata writePos {wpos} > file size "
                                f"of {size or 0}, skipping to new file")
                wfile, wpos, salvaged = wfile + 1, 0, True
            if rfile > wfile or (rfile == wfile and rpos > wpos):
                self._log.error(f"DISKQUEUE({self.name}) read position {rfile},{rpos} > write position {wfile},{wpos}"
                                f", corruption, skipping to next writeFileNum and resetting 0...")
                for num in range(rfile, wfile + 1):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._file_name(num))
                rfile, rpos, wfile, wpos, depth, salvaged = wfile + 1, 0, wfile + 1, 0, 0, False
                self._changes += 1
        self._rfile, self._rpos, self._wfile, self._wpos = rfile, rpos, wfile, wpos
        self._lowest = rfile
        if salvaged is not False:
            counted = self._count_records()
            if depth is not None:
                self._log.warn(f"DISKQUEUE({self.name}) depth recounted after salvage: {depth} -> {counted}")
            depth = counted
            self._changes += 1
        assert depth is not None  # recounted above when the meta file had none
        self._unread = depth
        self._check_tail()

    def _count_records(self) -> int:
        """Records the reader will find from the read cursor on (it stops at the first bad one in a file)."""
        count = 0
        for num in range(self._rfile, self._wfile + 1):
            size = self._file_size(num)
            if size is None:
                continue
            limit = size if num < self._wfile else min(size, self._wpos)
            pos = self._rpos if num == self._rfile else 0
            with open(self._file_name(num), "rb", buffering=_READ_CHUNK) as f:
                f.seek(pos)
                while pos + 4 <= limit:
                    (length,) = _LEN.unpack(f.read(4))
                    if length < self._min_size or length > self._max_size or pos + 4 + length > limit:
                        break
                    f.seek(length, os.SEEK_CUR)
                    pos += 4 + length
                    count += 1
        return count

    def _check_tail(self) -> None:
        """At the end of the queue the unread count must be 0; fix it like Go does (the data is gone anyway)."""
        if self._unread and self._rfile == self._wfile and self._rpos >= self._wpos:
            kind = "negative depth at tail ({}), metadata corruption" if self._unread < 0 else \
                "positive depth at tail ({}), data loss"
            self._log.error(f"DISKQUEUE({self.name}) {kind.format(self._unread)}, resetting 0...")
            self._unread = 0
            self._changed()

    # ---- writing --------------------------------------------------------------------------------

    def put(self, data: bytes) -> None:
        """Append one record; with sync_every=1 it is fsynced before this returns, or (with a group commit) by the
        group's next round. Raises BackendError."""
        if self._closed:
            raise BackendError("exiting")
        size = len(data)
        if size < self._min_size or size > self._max_size:
            raise BackendError(f"invalid message write size ({size}) minMsgSize={self._min_size} "
                               f"maxMsgSize={self._max_size}")
        total = 4 + size
        rolled = self._wpos > 0 and self._wpos + total > self._max_bytes
        if rolled:
            self._roll()
        fd = self._wfd
        if fd is None:
            fd = self._open_write()
        record = _LEN.pack(size) + data
        try:
            written = os.pwrite(fd, record, self._wpos)
            while written < total:  # a regular file only writes short when something is wrong; finish or fail
                written += os.pwrite(fd, record[written:], self._wpos + written)
        except OSError as err:
            self._write_failed()
            raise BackendError(f"failed to write to {self._file_name(self._wfile)} - {err}") from err
        self._wpos += total
        self._unread += 1
        self._changes += 1
        self._count += 1
        self._puts += 1
        if self._group is not None:
            self._group.written(self)  # the publisher waits for the round that syncs this (and the roll)
        elif rolled or self._sync_every == 1:
            self.sync()  # the caller's OK must mean "on disk"; Go also returns a sync error at roll
        elif self._count >= self._sync_every:
            self._sync_soon()  # like Go, a failure of this periodic sync is only logged
        elif self._timer is None:
            self._arm_timer()

    def _open_write(self) -> int:
        path = self._file_name(self._wfile)
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
        if self._wfd is not None:
            self._old_wfds.append(self._wfd)
            self._wfd = None
        if self._rfile == self._wfile:
            self._rlimit = self._wpos
            if self._rpos >= self._wpos:
                # the reader is caught up: move it along now (go-diskqueue#42 would call this file bad)
                self._next_read_file()
        self._wfile += 1
        self._wpos = 0
        self._changed()

    # ---- reading --------------------------------------------------------------------------------

    def read_one(self) -> tuple[bytes, object] | None:
        """The next unread record and its ack token; None when there is nothing to read."""
        while not self._closed:
            rfile, pos = self._rfile, self._rpos
            if rfile == self._wfile:
                limit = self._wpos
                if pos >= limit:
                    self._check_tail()
                    return None
                if self._rfd is None and not self._open_read():
                    continue
            else:
                if self._rfd is None and not self._open_read():
                    continue
                limit = self._rlimit
                if pos >= limit:
                    self._next_read_file()
                    continue
            buf = self._buf
            off = pos - self._buf_pos
            if off + 4 > len(buf):
                filled = self._fill(4, limit)
                if filled is None:
                    continue
                buf, off = filled, 0
            (size,) = _LEN.unpack_from(buf, off)
            if size < self._min_size or size > self._max_size:
                self._skip_bad_file(f"invalid message read size ({size})")
                continue
            end = off + 4 + size
            if end > len(buf):
                filled = self._fill(4 + size, limit)
                if filled is None:
                    continue
                buf, off, end = filled, 0, 4 + size
            data = buf[off + 4:end]
            if end == len(buf):
                self._buf = b""  # don't hold a consumed chunk while idle
            self._rpos = pos + 4 + size
            self._unread -= 1
            token = _Token(self._read_seq, rfile, pos)
            self._pending[self._read_seq] = token
            self._read_seq += 1
            if rfile != self._wfile:
                if self._rpos >= self._rlimit:
                    self._next_read_file()
            elif self._unread and self._rpos >= self._wpos:
                self._check_tail()
            return data, token
        return None

    def _open_read(self) -> bool:
        path = self._file_name(self._rfile)
        try:
            fd = os.open(path, os.O_RDONLY)
            self._rlimit = os.fstat(fd).st_size
        except OSError as err:
            self._skip_bad_file(str(err))
            return False
        self._log.info(f"DISKQUEUE({self.name}): readOne() opened {path}")
        self._rfd = fd
        self._buf = b""
        self._buf_pos = self._rpos
        return True

    def _fill(self, need: int, limit: int) -> bytes | None:
        """Read ahead from the cursor so the buffer holds ``need`` bytes; None (file skipped) on a short read."""
        pos = self._rpos
        fd = self._rfd
        assert fd is not None  # the caller opened the read file
        want = max(need, min(_READ_CHUNK, limit - pos))
        try:
            buf = os.pread(fd, want, pos) if pos + need <= limit else b""
        except OSError as err:
            self._skip_bad_file(str(err))
            return None
        if len(buf) < need:
            self._skip_bad_file("unexpected EOF")
            return None
        self._buf = buf
        self._buf_pos = pos
        return buf

    def _skip_bad_file(self, reason: str) -> None:
        """Go's handleReadError: give up on the read file and go on with the next one.

        The rename to ``.bad`` waits until the persisted read position leaves the file, so unacked records in it
        are still there for a restart.
        """
        path = self._file_name(self._rfile)
        self._log.error(f"DISKQUEUE({self.name}) reading at {self._rpos} of {path} - {reason}")
        if self._rfile == self._wfile:
            # the write file itself is unreadable: don't append behind garbage
            if self._wfd is not None:
                self._old_wfds.append(self._wfd)
                self._wfd = None
            self._wfile += 1
            self._wpos = 0
        self._log.warn(f"DISKQUEUE({self.name}) jump to next file and saving bad file as {path}.bad")
        self._bad.add(self._rfile)
        self._next_read_file()
        self._changed()

    def _next_read_file(self) -> None:
        if self._rfd is not None:
            os.close(self._rfd)
            self._rfd = None
        self._buf = b""
        self._rfile += 1
        self._rpos = 0
        if not self._pending:
            self._changed()  # the persisted read position moved on with the cursor: the file can go

    # ---- acknowledging ----------------------------------------------------------------------------

    def ack(self, token: object) -> None:
        """The record behind ``token`` is done with; unknown, repeated or pre-empty() tokens are ignored."""
        if not isinstance(token, _Token):
            return
        pending = self._pending
        seq = token.seq
        if pending.get(seq) is not token or self._closed:
            return
        del pending[seq]
        self._changes += 1
        self._count += 1
        head_file = next(iter(pending.values())).file_num if pending else self._rfile
        if head_file != self._lowest or self._count >= self._sync_every:
            # like Go, sync when the read side leaves a file (which also removes the file); an ack that is
            # persisted late only means a duplicate after a crash, so the acking greenlet does not wait
            self._sync_soon()
        elif self._timer is None:
            self._arm_timer()

    def depth(self) -> int:
        """Records not yet handed out by read_one (Go's depth, /stats backend_depth)."""
        return self._unread

    # ---- syncing --------------------------------------------------------------------------------

    def _changed(self) -> None:
        self._changes += 1
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
        while self._durable_puts < target and not self._shut and not self._closed:
            if self._syncing is not None:
                self._syncing.wait()
                continue
            if self._meta_wfile != self._wfile or self._old_wfds or self._dir_dirty or self._wfd is None:
                self.sync()
                continue
            with self._exclusive():
                puts, fd = self._puts, self._wfd
                try:
                    run_blocking(os.fdatasync, fd)
                except OSError as err:
                    raise BackendError(f"failed to sync {self._file_name(self._wfile)} - {err}") from err
                self._durable_puts = max(self._durable_puts, puts)
        if self._timer is None and self._synced < self._changes:
            self._arm_timer()

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
        pending = self._pending
        if pending:
            head = next(iter(pending.values()))
            pfile, ppos, depth = head.file_num, head.pos, self._unread + self._read_seq - head.seq
        else:
            pfile, ppos, depth = self._rfile, self._rpos, self._unread
        meta = f"{depth}\n{pfile},{ppos}\n{self._wfile},{self._wpos}\n".encode()
        closing = self._old_wfds
        self._old_wfds = []
        fsync_fds = [*closing, self._wfd] if self._wfd is not None else closing
        dir_dirty, self._dir_dirty = self._dir_dirty, False
        release = [(self._file_name(n), self._file_name(n) + ".bad" if n in self._bad else None)
                   for n in range(self._lowest, pfile)]
        try:
            if self._before_sync is not None:
                self._before_sync()
            errors = run_blocking(_persist, fsync_fds, self._data_path if dir_dirty else None, self._meta_path, meta,
                                  release)
        except BaseException as err:
            # keep the old write files for the next attempt: closing them now would leave them unsynced
            self._old_wfds[:0] = closing
            self._dir_dirty = self._dir_dirty or dir_dirty
            if self._timer is None:
                self._arm_timer()  # retry later even if nothing else changes
            if isinstance(err, OSError):
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
            path = self._file_name(num)
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
            self._pending.clear()
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
                os.unlink(self._meta_path)
            except FileNotFoundError:
                pass
            except OSError as err:
                self._log.error(f"DISKQUEUE({self.name}) failed to remove metadata file - {err}")
