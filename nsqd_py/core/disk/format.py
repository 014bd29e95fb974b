"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

The bytes a disk queue keeps, exactly as go-diskqueue v1.1.0 (Go nsqd) writes and reads them.

A queue ``NAME`` in a data dir has data files ``NAME.diskqueue.NNNNNN.dat`` holding records ``[int32 BE length]
[data]``, and a meta file ``NAME.diskqueue.meta.dat`` holding ``depth\\nreadFileNum,readPos\\nwriteFileNum,
writePos\\n``. Positions are ``(file number, byte offset)``.
"""

from __future__ import annotations

import os
import re
import struct

__all__ = ["LENGTH", "READ_CHUNK", "QueueFiles", "data_files_by_queue", "meta_text", "parse_meta"]

#: a record's header: its data's length
LENGTH = struct.Struct(">i")
#: how much a reader reads ahead
READ_CHUNK = 64 * 1024
#: a data file's name: its queue's name (the last ``.diskqueue.`` splits it, as a queue's own pattern does) and number
_DATA_FILE = re.compile(r"(.+)\.diskqueue\.(\d+)\.dat")
_META = re.compile(rb"\s*([+-]?\d+)\s*\n\s*([+-]?\d+)\s*,\s*([+-]?\d+)\s*\n\s*([+-]?\d+)\s*,\s*([+-]?\d+)\s*")


class QueueFiles:
    """Where one queue's files are, and which record lengths are valid in them."""

    __slots__ = ("data_path", "max_size", "meta_path", "min_size", "name", "prefix")

    def __init__(self, name: str, data_path: str, min_size: int, max_size: int) -> None:
        self.name = name
        self.data_path = data_path
        self.min_size = min_size
        self.max_size = max_size
        self.prefix = os.path.join(data_path, f"{name}.diskqueue.")
        self.meta_path = self.prefix + "meta.dat"

    def data_file(self, num: int) -> str:
        return f"{self.prefix}{num:06d}.dat"

    def data_files(self) -> list[int]:
        """The numbers of this queue's data files in the data dir, lowest first."""
        pattern = re.compile(re.escape(f"{self.name}.diskqueue.") + r"(\d+)\.dat")
        found = []
        for entry in os.listdir(self.data_path):
            match = pattern.fullmatch(entry)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def size(self, num: int) -> int | None:
        """Data file ``num``'s size; None when it does not exist."""
        try:
            return os.stat(self.data_file(num)).st_size
        except FileNotFoundError:
            return None

    def count_records(self, rfile: int, rpos: int, wfile: int, wpos: int) -> int:
        """Records a reader finds from ``rfile,rpos`` up to ``wfile,wpos`` (it stops at the first bad one in a file)."""
        count = 0
        for num in range(rfile, wfile + 1):
            size = self.size(num)
            if size is None:
                continue
            limit = size if num < wfile else min(size, wpos)
            pos = rpos if num == rfile else 0
            with open(self.data_file(num), "rb", buffering=READ_CHUNK) as f:
                f.seek(pos)
                while pos + 4 <= limit:
                    (length,) = LENGTH.unpack(f.read(4))
                    if length < self.min_size or length > self.max_size or pos + 4 + length > limit:
                        break
                    f.seek(length, os.SEEK_CUR)
                    pos += 4 + length
                    count += 1
        return count


def meta_text(depth: int, rfile: int, rpos: int, wfile: int, wpos: int) -> bytes:
    return f"{depth}\n{rfile},{rpos}\n{wfile},{wpos}\n".encode()


def parse_meta(raw: bytes) -> tuple[int, int, int, int, int] | str:
    """``(depth, readFileNum, readPos, writeFileNum, writePos)``, or why ``raw`` is not a meta file."""
    match = _META.match(raw)
    if match is None:
        return f"cannot parse {raw[:64]!r}"
    depth, rfile, rpos, wfile, wpos = (int(v) for v in match.groups())
    if min(rfile, rpos, wfile, wpos) < 0:
        return f"negative position in {raw!r}"
    return depth, rfile, rpos, wfile, wpos


def data_files_by_queue(data_path: str) -> dict[str, list[int]]:
    """Every queue's data file numbers in a data dir (lowest first), from one listing: what
    ``QueueFiles.data_files`` finds for each queue, without listing the directory once per queue."""
    found: dict[str, list[int]] = {}
    for entry in os.listdir(data_path):
        match = _DATA_FILE.fullmatch(entry)
        if match:
            found.setdefault(match.group(1), []).append(int(match.group(2)))
    for numbers in found.values():
        numbers.sort()
    return found
