"""The write-ahead location: where executor tasks publish the messages they read before FINing them.

A micro-batch's partition reads one *slice*: a numbered sequence of chunks (Arrow IPC, the rows exactly as `read`
yields them) that ends with an empty chunk. Every chunk number has exactly one winner among the attempts that offer
one, so a slice means the same rows to every attempt that reads it: a retried task, a replay after a driver restart,
a speculative copy, an attempt on an executor Spark has already given up on.

    LOCATION/<query>/_query                     the driver's marker: executors check they see the location
    LOCATION/<query>/<batch>/_planned           written when the driver plans the batch, never recreated
    LOCATION/<query>/<batch>/_committed         written when Spark commits the batch
    LOCATION/<query>/<batch>/<topic>/<host_port>-<index>/...   the slice (created with _planned)

The topic and the nsqd's address are encoded (`path_component`), so that every slice has a directory of its own.

How a chunk number is won depends on the storage (chunks.py): on a local or NFS path `os.link` is exclusive; on
other filesystems (`hdfs://`, `s3://`, ... through pyarrow.fs, whose moves replace their target) each attempt writes
files of its own and the attempts agree on one of them (agreement.py). Tasks never create a batch's directories, and
committed batches stay for `minBatchesToRetain` batches, so an attempt that is still running after its batch was
committed finds it out and hands its messages back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from . import storage
from .chunks import AgreedChunks, ChunkStore, LinkedChunks, end_counts, end_metadata
from .storage import redact
from .storage import resolve_location as resolve_location  # re-exported: the reader resolves its location here

#: the driver's marker in a query's directory; executors that cannot see it are not on shared storage
QUERY_MARKER = "_query"
PLANNED_MARKER = "_planned"
COMMITTED_MARKER = "_committed"


class NotSharedError(RuntimeError):
    """An executor cannot see the driver's write-ahead location."""


class DataLossError(RuntimeError):
    """A batch's slices are gone from the write-ahead location (failOnDataLoss)."""


def _filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of a location and its path there (storage.py maps the URIs users type); tests replace it."""
    return storage.filesystem(location)


def check_location(location: str) -> None:
    """Refuse, when the query starts, a location on which chunks cannot be published (storage.check_location)."""
    storage.check_location(location, _filesystem)


#: how slice directories are named: batches planned now record it in their offset; those planned before it was
#: recorded (layout 1) used topics and addresses as they are, and a replay of one keeps that
LAYOUT = 2
_KEPT_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")


def path_component(name: str) -> str:
    """``name`` (a topic, an nsqd address) as one path component that no other name shares, on every storage the
    location may be on: lowercase letters, digits, ``_`` and ``-`` stay, and every other byte (uppercase, ``.``,
    ``:``, ``#``, ...) becomes ``~`` and two hex digits, as does a leading ``_``. So ``.`` and ``..`` are never a
    component, ``Clicks`` and ``clicks`` differ on a case-insensitive filesystem too, no topic meets a batch's
    ``_planned`` or ``_committed``, and neither ``%`` (Hadoop's URI escape) nor ``+`` (a space to some S3 tools) is
    used."""
    return "".join(chr(byte) if byte in _KEPT_BYTES and not (i == 0 and byte == ord("_")) else f"~{byte:02x}"
                   for i, byte in enumerate(name.encode()))


@dataclass(frozen=True)
class SliceSpec:
    """One partition of a micro-batch: ``quota`` rows (and ``byte_quota`` body bytes, 0 = any) of ``topic`` from
    ``nsqd``. The driver plans it, the batch's offset keeps it (`encode`, and the offset's ``layout``), and a task
    reads it; the one description of a slice from planning to reading."""

    topic: str
    nsqd: str
    index: int
    quota: int
    byte_quota: int = 0
    #: the `LAYOUT` of the batch's offset
    layout: int = LAYOUT

    @property
    def name(self) -> str:
        """The slice's directory below its batch's."""
        if self.layout < 2:
            host_port = self.nsqd.replace(":", "_").replace("/", "_").replace("[", "").replace("]", "")
            return f"{self.topic}/{host_port}-{self.index}"
        return f"{path_component(self.topic)}/{path_component(self.nsqd)}-{self.index}"

    def encode(self) -> list[str | int]:
        return [self.topic, self.nsqd, self.index, self.quota, self.byte_quota]

    @classmethod
    def decode(cls, raw: list, layout: int = LAYOUT) -> SliceSpec:
        topic, nsqd, index, quota, byte_quota = raw
        return cls(str(topic), str(nsqd), int(index), int(quota), int(byte_quota), int(layout))


class SliceStore:
    """One query's batches and slices under a write-ahead location."""

    def __init__(self, location: str, query: str, filesystem: pafs.FileSystem | None = None) -> None:
        self.location = location
        self.fs, root = (filesystem, location) if filesystem is not None else _filesystem(location)
        self.root = f"{root.rstrip('/')}/{query}"
        self.chunks: ChunkStore = (LinkedChunks() if isinstance(self.fs, pafs.LocalFileSystem)
                                   else AgreedChunks(self.fs))

    # -- the driver ---------------------------------------------------------------------------------------------

    def mark(self) -> None:
        """Create the query's directory and its marker."""
        self.fs.create_dir(self.root, recursive=True)
        self._touch(f"{self.root}/{QUERY_MARKER}", b"nsqd_py write-ahead location\n")

    def plan(self, batch: int, slices: list[str]) -> None:
        """Record that ``batch`` is planned with these slices (`SliceSpec.name`), before Spark logs it."""
        self.mark()
        for name in slices:
            self.fs.create_dir(f"{self._batch_dir(batch)}/{name}", recursive=True)
        self._touch(f"{self._batch_dir(batch)}/{PLANNED_MARKER}", b"planned\n")

    def is_planned(self, batch: int) -> bool:
        return self._exists(f"{self._batch_dir(batch)}/{PLANNED_MARKER}")

    def commit(self, batch: int, retain: int) -> None:
        """Mark ``batch`` committed and remove the batches more than ``retain`` batches older than it."""
        self._touch(f"{self._batch_dir(batch)}/{COMMITTED_MARKER}", b"committed\n")
        for number in self.batches():
            if number <= batch - retain:
                self.fs.delete_dir(self._batch_dir(number))

    def batches(self) -> list[int]:
        """The batch numbers that have a directory."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return sorted(int(i.base_name) for i in infos if i.type == pafs.FileType.Directory and i.base_name.isdigit())

    def finished_slices(self, batch: int) -> dict[str, int]:
        """The rows of every slice of ``batch`` that has its end, by slice name."""
        return {name: counts["rows"] for name, counts in self.slice_ends(batch).items()}

    def slice_ends(self, batch: int) -> dict[str, dict[str, int]]:
        """What the end of every finished slice of ``batch`` records (its rows, and the finishing attempt's
        counts), by slice name."""
        ends = {}
        for name in self._slice_names(batch):
            counts = self.slice(batch, name).end_counts()
            if counts is not None:
                ends[name] = counts
        return ends

    def batch_rows(self, batch: int) -> int | None:
        """Rows in a batch's finished slices; None when none has finished."""
        finished = self.finished_slices(batch)
        return sum(finished.values()) if finished else None

    # -- the executors ------------------------------------------------------------------------------------------

    def check_planned(self, batch: int) -> None:
        """Fail clearly when the driver's record of ``batch`` is not visible here: the location is not shared, or
        the batch's slices were removed from it."""
        if self.is_planned(batch):
            return
        if self._exists(f"{self.root}/{QUERY_MARKER}"):
            raise DataLossError(
                f"batch {batch} is not in the nsq source's write-ahead location {redact(self.location)!r} any more "
                f"(removed from outside, or committed and retired long ago): its slices cannot be read")
        raise NotSharedError(
            f"the nsq source's write-ahead location {redact(self.location)!r} is not visible on this executor "
            f"({os.uname().nodename}): on a cluster it must be shared storage every node sees (HDFS, S3, a shared "
            f"volume); set the option 'writeAheadLocation'")

    def is_open(self, batch: int) -> bool:
        """False once the batch is committed or gone: an attempt still running then must not FIN anything."""
        directory = self._batch_dir(batch)
        return self._exists(f"{directory}/{PLANNED_MARKER}") and not self._exists(f"{directory}/{COMMITTED_MARKER}")

    def slice(self, batch: int, name: str) -> Slice:
        """The slice of ``batch`` named ``name`` (`SliceSpec.name`)."""
        return Slice(self.chunks, f"{self._batch_dir(batch)}/{name}")

    # -- helpers ------------------------------------------------------------------------------------------------

    def _batch_dir(self, batch: int) -> str:
        return f"{self.root}/{batch:012d}"

    def _slice_names(self, batch: int) -> list[str]:
        selector = pafs.FileSelector(self._batch_dir(batch), allow_not_found=True)
        names = []
        for topic in self.fs.get_file_info(selector):
            if topic.type == pafs.FileType.Directory:
                for part in self.fs.get_file_info(pafs.FileSelector(topic.path)):
                    if part.type == pafs.FileType.Directory:
                        names.append(f"{topic.base_name}/{part.base_name}")
        return names

    def _exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def _touch(self, path: str, content: bytes) -> None:
        if not self._exists(path):
            with self.fs.open_output_stream(path) as out:
                out.write(content)


class Slice:
    """One partition's chunks: rows, and after the last of them one without rows (the end)."""

    def __init__(self, chunks: ChunkStore, directory: str) -> None:
        self.chunks = chunks
        self.directory = directory

    def read(self, number: int) -> pa.Table | None:
        """Chunk ``number`` as won (no rows: the end), or None if no attempt offered that number yet."""
        return self.chunks.read(self.directory, number)

    def publish(self, number: int, table: pa.Table) -> bool:
        """Offer ``table`` as chunk ``number``: True if it won, False if another attempt's chunk did (or the
        slice's directory is gone: the batch was retired)."""
        return self.chunks.publish(self.directory, number, table)

    def finish(self, number: int, schema: pa.Schema, rows: int, counts: dict[str, int]) -> bool:
        """Offer the end as chunk ``number`` (``number`` data chunks and ``rows`` rows before it, and what the
        attempt counted); False if another chunk won that number."""
        metadata = end_metadata(number, rows, counts)
        return self.publish(number, pa.Table.from_batches([], schema.with_metadata(metadata)))

    def numbers(self) -> list[int]:
        """The chunk numbers offered so far, in order."""
        return self.chunks.numbers(self.directory)

    def end_counts(self) -> dict[str, int] | None:
        """The rows of the slice and the finishing attempt's counts if it has its end, else None."""
        numbers = self.numbers()
        table = self.read(numbers[-1]) if numbers else None
        return end_counts(table) if table is not None and table.num_rows == 0 else None


