"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

The read side of a disk queue: the read cursor, records handed out and not acked yet, bad files.

A record handed out by :meth:`DiskReader.read_one` stays on disk, and before the persisted read position, until it
is acked, so a crash redelivers it instead of losing it (Go's diskqueue forgets it as soon as it is read). Reading
never yields to the gevent hub. :class:`~nsqd_py.core.disk.queue.DiskQueue` adds writing and syncing on top.
"""

from __future__ import annotations

import itertools
import os
from collections import deque

from nsqd_py.runtime.log import Logger

from ..message import int32_at
from .format import READ_CHUNK, QueueFiles

__all__ = ["PEEK_BYTES", "DiskReader"]

#: each reader numbers its records from its own base, 2**40 apart, so a token from another queue is not taken for one
#: of this queue's (unless a queue hands out 2**40 records in one run of the process)
_SEQ_BASES = itertools.count(1)
_SEQ_SPAN_BITS = 40

#: the most a peek reads of a disk queue, in records' bytes (n large bodies must not fill the memory)
PEEK_BYTES = 32 << 20


class DiskReader:
    """Positions and reading; the write position is the writer's, read here to know where the data ends.

    Three positions matter: the write position (where the next record goes), the read cursor (the next record
    read_one returns; memory only) and the persisted read position (the oldest record handed out and not acked
    yet, or the read cursor when everything handed out is acked), which the meta file stores so that Go or we
    redeliver what was in flight.

    A record's ack token is its read sequence number, numbered from a base of the reader's own. Records are acked
    mostly in the order they were read, so the positions of those handed out are kept in read order from the
    oldest unacked one (two deques, no object per record), with the few acked ahead of it in a set: the persisted
    read position is the front of the deques.
    """

    def __init__(self, files: QueueFiles, logger: Logger) -> None:
        self.name = files.name
        self._files = files
        self._min_size = files.min_size
        self._max_size = files.max_size
        self._log = logger
        self._wfile = self._wpos = 0
        self._rfile = self._rpos = 0
        self._unread = 0  # records between the read cursor and the write position
        self._unread_bytes = 0  # their sizes (without the length prefix), summed
        self._read_seq = next(_SEQ_BASES) << _SEQ_SPAN_BITS  # sequence number of the next record handed out
        self._head_seq = self._read_seq  # the oldest one handed out and not acked (_read_seq when there is none)
        #: from _head_seq on, in read order, where each record handed out starts (acked ones among them)
        self._pending_files: deque[int] = deque()
        self._pending_pos: deque[int] = deque()
        self._acked_ahead: set[int] = set()  # acked sequence numbers above _head_seq
        self._lowest = 0  # lowest file number that may still be on disk
        self._bad: set[int] = set()  # files with a bad record: renamed to .bad (not removed) once released
        self._rfd: int | None = None
        self._rlimit = 0  # size of the open read file once it is finished (Go's maxBytesPerFileRead)
        self._buf = b""  # read-ahead of the read file, starting at file offset _buf_pos
        self._buf_pos = 0
        self._changes = 0  # bumped by every change the meta file should reflect
        self._closed = False  # no more puts, reads or syncs

    def _changed(self) -> None:
        """The positions the meta file names changed."""
        self._changes += 1

    def _leave_write_file(self) -> None:
        """Writing goes on at the start of the next file."""
        self._wfile += 1
        self._wpos = 0

    def depth(self) -> int:
        """Records not yet handed out by read_one (Go's depth, /stats backend_depth)."""
        return self._unread

    def unread_bytes(self) -> int:
        """The sizes of those records summed (what a channel's max_channel_bytes counts of its disk queue)."""
        return self._unread_bytes

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
            size = int32_at(buf, off)
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
            self._unread_bytes -= size
            token = self._read_seq
            self._pending_files.append(rfile)
            self._pending_pos.append(pos)
            self._read_seq = token + 1
            if rfile != self._wfile:
                if self._rpos >= self._rlimit:
                    self._next_read_file()
            elif self._unread and self._rpos >= self._wpos:
                self._check_tail()
            return data, token
        return None

    def peek(self, limit: int) -> list[bytes]:
        """Up to ``limit`` unread records from the read cursor on, in the order read_one returns them, read with
        pread and without reading them for real: the cursor, the pending records, the depth and the meta file stay
        as they are (/channel/peek). A bad record ends its file, as read_one would skip the rest of it."""
        found: list[bytes] = []
        if self._closed:
            return found
        budget = PEEK_BYTES
        for num in range(self._rfile, self._wfile + 1):
            if len(found) >= limit or budget <= 0:
                break
            pos = self._rpos if num == self._rfile else 0
            budget = self._peek_file(num, pos, limit, found, budget)
        return found

    def _peek_file(self, num: int, pos: int, limit: int, found: list[bytes], budget: int) -> int:
        """The records of data file ``num`` from ``pos`` on, appended to ``found`` until it holds ``limit`` or they
        pass ``budget`` bytes (the first one always comes); the budget left."""
        try:
            fd = os.open(self._files.data_file(num), os.O_RDONLY)
        except OSError:
            return budget
        try:
            end = self._wpos if num == self._wfile else os.fstat(fd).st_size
            buf = b""
            buf_pos = pos
            while len(found) < limit and pos + 4 <= end:
                off = pos - buf_pos
                if off + 4 > len(buf):
                    buf, buf_pos, off = os.pread(fd, max(4, min(READ_CHUNK, end - pos)), pos), pos, 0
                    if len(buf) < 4:
                        return budget
                size = int32_at(buf, off)
                if size < self._min_size or size > self._max_size or pos + 4 + size > end:
                    return budget
                if found and size > budget:
                    return 0
                if off + 4 + size > len(buf):
                    buf, buf_pos, off = os.pread(fd, max(4 + size, min(READ_CHUNK, end - pos)), pos), pos, 0
                    if len(buf) < 4 + size:
                        return budget
                found.append(buf[off + 4:off + 4 + size])
                budget -= size
                pos += 4 + size
            return budget
        except OSError:
            return budget
        finally:
            os.close(fd)

    def _take_token(self, token: object) -> bool:
        """Whether ``token`` names a record handed out and not acked, which it no longer is; False for unknown,
        repeated, pre-empty() or after-close tokens."""
        if not isinstance(token, int) or self._closed:
            return False
        head = self._head_seq
        ahead = self._acked_ahead
        if token != head:
            if token < head or token >= self._read_seq or token in ahead:
                return False
            ahead.add(token)
            return True
        files, positions = self._pending_files, self._pending_pos
        files.popleft()
        positions.popleft()
        head += 1
        while ahead and head in ahead:
            ahead.remove(head)
            files.popleft()
            positions.popleft()
            head += 1
        self._head_seq = head
        return True

    def _forget_pending(self) -> None:
        """No record handed out is pending any more (the queue was emptied): their tokens become no-ops."""
        self._pending_files.clear()
        self._pending_pos.clear()
        self._acked_ahead.clear()
        self._head_seq = self._read_seq

    def _persisted_read_file(self) -> int:
        """The file of the persisted read position."""
        files = self._pending_files
        return files[0] if files else self._rfile

    def _persisted_read(self) -> tuple[int, int, int]:
        """The persisted read position and the depth the meta file gives with it (unacked records count)."""
        if self._pending_files:
            return (self._pending_files[0], self._pending_pos[0],
                    self._unread + self._read_seq - self._head_seq)
        return self._rfile, self._rpos, self._unread

    def _check_tail(self) -> None:
        """At the end of the queue the unread count must be 0; fix it like Go does (the data is gone anyway)."""
        if self._unread and self._rfile == self._wfile and self._rpos >= self._wpos:
            kind = "negative depth at tail ({}), metadata corruption" if self._unread < 0 else \
                "positive depth at tail ({}), data loss"
            self._log.error(f"DISKQUEUE({self.name}) {kind.format(self._unread)}, resetting 0...")
            self._unread = 0
            self._unread_bytes = 0
            self._changed()

    def _write_file_final(self) -> None:
        """Writing is about to leave its file: a reader in it now knows where the file ends."""
        if self._rfile == self._wfile:
            self._rlimit = self._wpos
            if self._rpos >= self._wpos:
                # the reader is caught up: move it along now (go-diskqueue#42 would call this file bad)
                self._next_read_file()

    def _open_read(self) -> bool:
        path = self._files.data_file(self._rfile)
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
        want = max(need, min(READ_CHUNK, limit - pos))
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
        path = self._files.data_file(self._rfile)
        self._log.error(f"DISKQUEUE({self.name}) reading at {self._rpos} of {path} - {reason}")
        if self._rfile == self._wfile:
            self._leave_write_file()  # the write file itself is unreadable: don't append behind garbage
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
        if not self._pending_files:
            self._changed()  # the persisted read position moved on with the cursor: the file can go
