"""RetainedLog: every message a topic accepted, in order, on disk for replay (beyond nsqd: --topic-retention).

The topic appends each publish's records in one write (an MPUB is one ``pwrite``) to the segment being written,
which is sealed once the next publish would take it past ``--max-bytes-per-file``. Trimming removes whole sealed
segments, oldest first: one whose last message is older than the retention, or while the log is over its size,
or every one once retention is off; never a segment a replay still reads (:meth:`pin`). A segment being written whose
messages are all past the retention is sealed first, so a quiet topic trims too. Nothing here costs per message
beyond the write: timestamps come from a batch's first and last records, marks (retained_format.py) per 64 KiB.

With ``--sync-every=1`` an append joins a group commit round of the acks (acks.py) as a disk queue's record does,
so the publish's OK waits for the fsync covering the channels' copies and this log alike. Otherwise the log is
fsynced when a segment is sealed and when the topic closes.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import NamedTuple

import gevent

from nsqd_py.runtime.log import Logger

from ..errors import BackendError
from .acks import Acks
from .appended_files import AppendedFiles
from .format import LENGTH
from .retained_format import TIMESTAMP, Segment, parse_records, read_index, scan_segment

__all__ = ["Position", "RetainedLog"]

#: how often the log looks for segments to trim
TRIM_SECONDS = 1.0


class Position(NamedTuple):
    """A place in the log: before the record at ``offset`` of segment ``seg``, message number ``seq``."""

    seg: int
    offset: int
    seq: int


#: records up to this size are read back, whatever --max-msg-size says now
READ_LIMIT = 1 << 30


class RetainedLog(AppendedFiles):
    """One topic's retained segments (``name``: the topic's); a sealed segment's descriptor is left to the next sync
    (AppendedFiles)."""

    def __init__(self, name: str, data_path: str, segment_bytes: int, min_size: int, max_size: int, acks: Acks,
                 logger: Logger, files: list[int]) -> None:
        """``files``: the numbers of the topic's segments on disk (from one listing of the data dir)."""
        super().__init__(f"RETAINED({name})", f"retained log {name}", data_path, logger)
        self.name = name
        self._prefix = os.path.join(data_path, f"{name}.retained.")
        self._segment_bytes = segment_bytes
        self._min_size = min_size
        #: the largest record read back: what this start's --max-msg-size allows or more, since an earlier start may
        #: have allowed larger ones (a lower limit must not cut the segment at the first of them)
        self._max_size = max(max_size, READ_LIMIT)
        self._acks = acks
        #: the limits in force (configure); both 0: retention is off, nothing is appended and all unpinned goes
        self.max_age = 0
        self.max_bytes = 0
        self._segments: list[Segment] = []
        self._bytes = 0
        self._next_num = 1
        self._empty_seq = 0  # the sequence number of the next message while no segment is left
        self._pins: dict[str, int] = {}  # owner (a replaying channel) -> the segment it reads
        self._trimmer: gevent.Greenlet | None = None
        self._load(files)

    # ---- files ----------------------------------------------------------------------------------

    def _path(self, num: int, kind: str = "dat") -> str:
        return f"{self._prefix}{num:06d}.{kind}"

    def _load(self, files: list[int]) -> None:
        seq = 0
        for num in files:
            path = self._path(num)
            size = os.stat(path).st_size
            segment = read_index(self._path(num, "idx"), num, size) if num != files[-1] else None
            if segment is None:
                segment = scan_segment(path, num, seq, self._min_size, self._max_size)
                if segment.size < size:
                    self._log.warn(f"RETAINED({self.name}): {path}: {size - segment.size} bytes after the last "
                                   "whole record cut off")
                    os.truncate(path, segment.size)
            seq = segment.first_seq + segment.count
            self._segments.append(segment)
            self._bytes += segment.size
        if files:
            self._next_num = files[-1] + 1
            self._log.info(f"RETAINED({self.name}): {self.count()} messages in {len(files)} segments")

    @property
    def on(self) -> bool:
        return bool(self.max_age or self.max_bytes)

    def configure(self, max_age: int, max_bytes: int) -> None:
        """The retention in force (ns, bytes; both 0: off); trimming follows it from the next round on."""
        self.max_age, self.max_bytes = max_age, max_bytes
        if self._trimmer is None and not self._closed:
            self._trimmer = gevent.spawn(self._trim_loop)

    # ---- writing --------------------------------------------------------------------------------

    def append(self, records: list[bytes]) -> None:
        """One publish's records, in one write; BackendError when it failed (then nothing of it is kept)."""
        if self._closed:
            raise BackendError("exiting")
        if len(records) == 1:
            data = LENGTH.pack(len(records[0])) + records[0]
        else:
            parts: list[bytes] = []
            for record in records:
                parts.append(LENGTH.pack(len(record)))
                parts.append(record)
            data = b"".join(parts)
        segments = self._segments
        if not segments or (segments[-1].size and segments[-1].size + len(data) > self._segment_bytes):
            self._roll()
        segment = segments[-1]
        fd = self._fd if self._fd is not None else self._open_write(segment)
        try:
            written = os.pwrite(fd, data, segment.size)
            while written < len(data):
                written += os.pwrite(fd, data[written:], segment.size + written)
        except OSError as err:
            raise BackendError(f"failed to write to {self._path(segment.num)} - {err}") from err
        segment.note(TIMESTAMP.unpack_from(records[0])[0], TIMESTAMP.unpack_from(records[-1])[0], len(records),
                     len(data))
        self._bytes += len(data)
        if self._acks.durable:
            self._acks.written(self)

    def _open_write(self, segment: Segment) -> int:
        try:
            fd = os.open(self._path(segment.num), os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError as err:
            raise BackendError(f"failed to open {self._path(segment.num)} - {err}") from err
        self._fd = fd
        return fd

    def _roll(self) -> None:
        """Seal the segment being written (its index written, its data synced by the next round or now) and begin
        the next."""
        if self._segments:
            sealed = self._segments[-1]
            sealed.write_index(self._path(sealed.num, "idx"))
            self._release_write()
        self._segments.append(Segment(self._next_num, self.tail().seq))
        self._next_num += 1
        self._dir_dirty = True

    def _release_write(self) -> None:
        """Stop writing the last segment: its descriptor is synced and closed by the next round (or now)."""
        if self._retire_fd() is not None and not self._acks.durable:
            gevent.spawn(self.sync)

    # ---- reading --------------------------------------------------------------------------------

    def count(self) -> int:
        return sum(s.count for s in self._segments)

    def byte_size(self) -> int:
        return self._bytes

    def earliest(self) -> Position:
        """Before the oldest retained message (the tail when there is none)."""
        if not self._segments:
            return self.tail()
        first = self._segments[0]
        return Position(first.num, 0, first.first_seq)

    def tail(self) -> Position:
        """After the newest message: where the next append goes."""
        if not self._segments:
            return Position(self._next_num, 0, self._empty_seq)
        last = self._segments[-1]
        return Position(last.num, last.size, last.first_seq + last.count)

    def oldest_timestamp(self) -> int | None:
        """The oldest retained message's timestamp (ns); None when nothing is retained."""
        for segment in self._segments:
            if segment.count:
                return segment.first_ts
        return None

    def at_time(self, ts: int) -> Position:
        """Before the first message stamped ``ts`` (ns) or later, found from the marks; the tail when there is none."""
        for segment in self._segments:
            if segment.count and segment.last_ts >= ts:
                return self._seek(segment, 0, ts)
        return self.tail()

    def at_seq(self, seq: int) -> Position:
        """Before message number ``seq`` (the earliest or the tail when it is not retained)."""
        for segment in self._segments:
            if seq < segment.first_seq + segment.count:
                return self._seek(segment, 2, max(seq, segment.first_seq))
        return self.tail()

    def _seek(self, segment: Segment, key: int, value: int) -> Position:
        """In ``segment``, before the first record whose timestamp (``key`` 0) or sequence number (2) is ``value``
        or more: from the last mark below it, reading on."""
        start = Position(segment.num, 0, segment.first_seq)
        for mark in segment.marks:
            if mark[key] >= value:
                break
            start = Position(segment.num, mark[1], mark[2])
        end = Position(segment.num, segment.size, segment.first_seq + segment.count)
        pos = start
        while pos < end:
            records, after = self.read(pos, end, 1024 * 1024)
            for record in records:
                if (TIMESTAMP.unpack_from(record)[0] if key == 0 else pos.seq) >= value:
                    return pos
                pos = Position(pos.seg, pos.offset + 4 + len(record), pos.seq + 1)
            pos = after
        return end

    def read(self, pos: Position, end: Position, max_bytes: int) -> tuple[list[bytes], Position]:
        """The records from ``pos`` up to ``end`` (at most about ``max_bytes``, at least one), and the position
        after them. A position in a segment that is gone moves to the oldest retained."""
        while (pos.seg, pos.offset) < (end.seg, end.offset):
            segment = self._segment(pos.seg)
            if segment is None:
                if self._segments and pos.seg < self._segments[0].num:
                    pos = self.earliest()
                    continue
                return [], end
            limit = end.offset if pos.seg == end.seg else segment.size
            if pos.offset >= limit:
                pos = Position(pos.seg + 1, 0, segment.first_seq + segment.count)
                continue
            want = min(limit - pos.offset, max(max_bytes, 4 + self._max_size))
            with open(self._path(pos.seg), "rb", buffering=0) as f:
                f.seek(pos.offset)
                data = f.read(want)
            records, used = parse_records(data, self._min_size, self._max_size)
            if not records:
                raise BackendError(f"invalid record in {self._path(pos.seg)} at {pos.offset}")
            return records, Position(pos.seg, pos.offset + used, pos.seq + len(records))
        return [], end

    def _segment(self, num: int) -> Segment | None:
        segments = self._segments
        if not segments:
            return None
        at = num - segments[0].num
        return segments[at] if 0 <= at < len(segments) else None

    # ---- trimming -------------------------------------------------------------------------------

    def pin(self, owner: str, seg: int) -> None:
        """``owner`` still reads segment ``seg`` and those after it: trimming leaves them."""
        self._pins[owner] = seg

    def unpin(self, owner: str) -> None:
        self._pins.pop(owner, None)

    def _trim_loop(self) -> None:
        while not self._closed:
            gevent.sleep(TRIM_SECONDS)
            try:
                self.trim(time.time_ns())
            except OSError as err:
                self._log.error(f"RETAINED({self.name}): trimming failed - {err}")

    def trim(self, now: int) -> None:
        """Remove the segments the retention in force no longer keeps, oldest first, up to the first pinned."""
        floor = min(self._pins.values(), default=self._next_num)
        segments = self._segments
        while segments and segments[0].num < floor:
            oldest = segments[0]
            expired = bool(self.max_age) and oldest.count > 0 and oldest.last_ts < now - self.max_age
            if self.on and not expired and not (self.max_bytes and self._bytes > self.max_bytes):
                return
            if oldest is segments[-1]:
                if (self.on and not expired) or not oldest.size:
                    return  # over the size, but it is the segment being written; or nothing is in it
                self._release_write()  # it goes now, and the next append begins a new segment
            self._remove(oldest)

    def _remove(self, segment: Segment) -> None:
        del self._segments[0]
        self._bytes -= segment.size
        if not self._segments:
            self._empty_seq = segment.first_seq + segment.count
        for kind in ("dat", "idx"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(segment.num, kind))
        self._log.info(f"RETAINED({self.name}): trimmed segment {segment.num} ({segment.count} messages)")

    # ---- whole log ------------------------------------------------------------------------------

    def close(self) -> None:
        """Sync and close (the topic is closing); the segments stay for the next start."""
        if self._closed:
            return
        self.sync()
        self._stop()

    def delete(self) -> None:
        """Close and remove every segment (the topic was deleted)."""
        self._stop()
        while self._segments:
            self._remove(self._segments[0])

    def _stop(self) -> None:
        self._closed = True
        if self._trimmer is not None:
            self._trimmer.kill(block=False)
            self._trimmer = None
        self._close_files()

