"""The files of a topic's retained log (beyond nsqd: --topic-retention), and what is known of each segment.

A topic ``T`` with retention keeps ``T.retained.NNNNNN.dat`` segments, each a run of go-diskqueue records
``[int32 BE size][timestamp int64][attempts uint16][id 16][body]`` in the order the topic accepted them, and, for a
segment no longer written, ``T.retained.NNNNNN.idx``: its first sequence number, count, size, first and last
timestamps and a mark (timestamp, offset, sequence number) at least every ``MARK_EVERY`` bytes, so a replay finds a
time by reading one mark's stretch, not the log. An index is a cache: one that is missing or does not match its
segment's size is rebuilt by reading the segment. Go nsqd opens none of these files (it reads ``*.diskqueue.*`` and
nsqd.dat only).
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from dataclasses import dataclass, field

from .format import LENGTH

__all__ = ["MARK_EVERY", "Segment", "parse_records", "retained_files_by_topic", "scan_segment"]

#: the most bytes between two marks of a segment's index
MARK_EVERY = 64 * 1024
#: a record's timestamp (its first 8 bytes)
TIMESTAMP = struct.Struct(">q")
_INDEX_HEAD = struct.Struct(">8sqqqqqq")
_INDEX_MAGIC = b"NSQRIDX1"
_MARK = struct.Struct(">qqq")
_SCAN_CHUNK = 4 * 1024 * 1024
_SEGMENT_FILE = re.compile(r"(.+)\.retained\.(\d{6,})\.dat")


@dataclass(slots=True)
class Segment:
    """One segment file: its number, the sequence number of its first message, and what it holds."""

    num: int
    first_seq: int
    count: int = 0
    size: int = 0
    first_ts: int = 0
    last_ts: int = 0
    #: (timestamp, offset, sequence number) of a record, the first at offset 0
    marks: list[tuple[int, int, int]] = field(default_factory=list)

    def note(self, first_ts: int, last_ts: int, count: int, size: int) -> None:
        """``count`` records of ``size`` bytes appended at the end, the first stamped ``first_ts``."""
        if not self.marks or self.size - self.marks[-1][1] >= MARK_EVERY:
            self.marks.append((first_ts, self.size, self.first_seq + self.count))
        if not self.count:
            self.first_ts = first_ts
        self.last_ts = last_ts
        self.count += count
        self.size += size

    def write_index(self, path: str) -> None:
        """Write the index (when the segment is sealed); a failure only costs a read of the segment at the next
        start."""
        data = _INDEX_HEAD.pack(_INDEX_MAGIC, self.first_seq, self.count, self.size, self.first_ts, self.last_ts,
                                len(self.marks)) + b"".join(_MARK.pack(*mark) for mark in self.marks)
        with contextlib.suppress(OSError), open(path, "wb") as f:
            f.write(data)


def read_index(path: str, num: int, size: int) -> Segment | None:
    """The segment as its index describes it; None when there is no index or it does not match ``size``."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        magic, first_seq, count, indexed, first_ts, last_ts, marks = _INDEX_HEAD.unpack_from(data)
    except (OSError, struct.error):
        return None
    if magic != _INDEX_MAGIC or indexed != size or len(data) != _INDEX_HEAD.size + marks * _MARK.size:
        return None
    found = [_MARK.unpack_from(data, _INDEX_HEAD.size + i * _MARK.size) for i in range(marks)]
    return Segment(num, first_seq, count, size, first_ts, last_ts, [(m[0], m[1], m[2]) for m in found])


def parse_records(data: bytes, min_size: int, max_size: int) -> tuple[list[bytes], int]:
    """The whole records at the start of ``data`` and the bytes they take; parsing stops at a torn or invalid one."""
    records: list[bytes] = []
    pos = 0
    end = len(data)
    while pos + 4 <= end:
        (size,) = LENGTH.unpack_from(data, pos)
        if size < min_size or size > max_size or pos + 4 + size > end:
            break
        records.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return records, pos


def scan_segment(path: str, num: int, first_seq: int, min_size: int, max_size: int) -> Segment:
    """The segment as its records describe it, read whole; its size stops at the first torn or invalid record (a
    crash mid-append leaves one at the end)."""
    segment = Segment(num, first_seq)
    with open(path, "rb", buffering=0) as f:
        carry = b""
        while True:
            chunk = f.read(_SCAN_CHUNK)
            data = carry + chunk if carry else chunk
            records, used = parse_records(data, min_size, max_size)
            for record in records:
                ts = TIMESTAMP.unpack_from(record)[0]
                segment.note(ts, ts, 1, 4 + len(record))
            carry = data[used:]
            if not chunk or (len(carry) >= 4 and not min_size <= LENGTH.unpack_from(carry)[0] <= max_size):
                return segment


def retained_files_by_topic(data_path: str) -> dict[str, list[int]]:
    """Every topic's retained segment numbers in a data dir (lowest first), from one listing."""
    found: dict[str, list[int]] = {}
    for entry in os.listdir(data_path):
        match = _SEGMENT_FILE.fullmatch(entry)
        if match:
            found.setdefault(match.group(1), []).append(int(match.group(2)))
    for numbers in found.values():
        numbers.sort()
    return found
