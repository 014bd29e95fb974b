"""The write-ahead location: where executor tasks publish the messages they read before FINing them.

A micro-batch's partition reads one *slice*: a numbered sequence of chunk files (Arrow IPC, the rows exactly as
`read` yields them) that ends with an empty chunk. Each chunk is written to a temporary name and published under
its number only if no other attempt published that number first, so every number has one winner and a slice means
the same rows to every attempt that reads it: a retried task, a replay after a driver restart, a speculative copy.

    LOCATION/<query>/_query                              written by the driver: executors check they can see it
    LOCATION/<query>/<batch>/<topic>/<host_port>-<index>/<chunk>.arrow

On a local or NFS path (`os.link`) publishing is exclusive and fsynced (file and directory). Other filesystems go
through pyarrow.fs (`hdfs://`, `s3://`, ...): a chunk is written and moved into place when its number is free, which
leaves a short race between two attempts of one partition (HDFS and S3 give no portable rename-if-absent).
"""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.fs as pafs

#: the driver's marker in a query's directory; executors that cannot see it are not on shared storage
QUERY_MARKER = "_query"
_END_ROWS = b"nsq.slice.rows"


class NotSharedError(RuntimeError):
    """An executor cannot see the driver's write-ahead location."""


def resolve_location(location: str) -> str:
    """An absolute location, as the executors must see it: relative paths are taken from the driver's cwd."""
    if "://" in location:
        return location
    return os.path.abspath(os.path.expanduser(location))


def _filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in location:
        return pafs.LocalFileSystem(), location
    return pafs.FileSystem.from_uri(location)


class SliceStore:
    """One query's slices under a write-ahead location."""

    def __init__(self, location: str, query: str) -> None:
        self.location = location
        self.fs, root = _filesystem(location)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.root = f"{root.rstrip('/')}/{query}"

    def mark(self) -> None:
        """(Driver.) Create the query's directory and its marker."""
        self.fs.create_dir(self.root, recursive=True)
        marker = f"{self.root}/{QUERY_MARKER}"
        if self.fs.get_file_info(marker).type == pafs.FileType.NotFound:
            with self.fs.open_output_stream(marker) as out:
                out.write(b"nsqd_py write-ahead location\n")

    def check_shared(self) -> None:
        """(Executor.) Fail clearly when the driver's location is not visible here."""
        if self.fs.get_file_info(f"{self.root}/{QUERY_MARKER}").type == pafs.FileType.NotFound:
            raise NotSharedError(
                f"the nsq source's write-ahead location {self.location!r} is not visible on this executor "
                f"({os.uname().nodename}): on a cluster it must be shared storage every node sees (HDFS, S3, a shared "
                f"volume); set the option 'writeAheadLocation'")

    def slice(self, batch: int, topic: str, nsqd: str, index: int) -> Slice:
        name = nsqd.replace(":", "_").replace("/", "_").replace("[", "").replace("]", "")
        return Slice(self, f"{self.root}/{batch:012d}/{topic}/{name}-{index}")

    def batches(self) -> list[int]:
        """The batch numbers that have slices."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return sorted(int(i.base_name) for i in infos if i.type == pafs.FileType.Directory and i.base_name.isdigit())

    def finished_slices(self, batch: int) -> dict[str, int]:
        """The rows of every slice of ``batch`` that has its end, by slice directory."""
        selector = pafs.FileSelector(f"{self.root}/{batch:012d}", recursive=True, allow_not_found=True)
        last: dict[str, str] = {}
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File and info.base_name.endswith(".arrow") and info.base_name[0] != ".":
                directory = info.path.rsplit("/", 1)[0]
                last[directory] = max(last.get(directory, ""), info.path)
        tables = {directory: self._read_table(path) for directory, path in last.items()}
        return {directory: _end_rows(table) for directory, table in tables.items() if table.num_rows == 0}

    def batch_rows(self, batch: int) -> int | None:
        """Rows in a batch's finished slices; None when none has finished."""
        finished = self.finished_slices(batch)
        return sum(finished.values()) if finished else None

    def delete_through(self, batch: int) -> None:
        """Remove the slices of every batch up to ``batch`` (they are committed)."""
        for number in self.batches():
            if number <= batch:
                self.fs.delete_dir(f"{self.root}/{number:012d}")

    def _read_table(self, path: str) -> pa.Table:
        with self.fs.open_input_file(path) as source:
            return pa.ipc.open_file(source).read_all()

    def publish(self, directory: str, name: str, table: pa.Table) -> bool:
        """Write ``table`` as ``directory/name`` unless that exists; True if this call published it."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue()
        if self.local:
            return _publish_local(directory, name, data)
        return self._publish_remote(directory, name, data)

    def _publish_remote(self, directory: str, name: str, data: pa.Buffer) -> bool:
        final = f"{directory}/{name}"
        if self.exists(final):
            return False
        self.fs.create_dir(directory, recursive=True)
        temporary = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp"
        with self.fs.open_output_stream(temporary) as out:
            out.write(data)
        if self.exists(final):
            self.fs.delete_file(temporary)
            return False
        self.fs.move(temporary, final)
        return True

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound


def _publish_local(directory: str, name: str, data: pa.Buffer) -> bool:
    """Write, fsync, then hard-link into place: `link` fails if the name exists, so only one attempt wins."""
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, name)
    temporary = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "wb") as out:
        out.write(memoryview(data))
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(temporary, final)
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True


def _end_rows(table: pa.Table) -> int:
    return int((table.schema.metadata or {}).get(_END_ROWS, b"0"))


class Slice:
    """One partition's chunks `<n>.arrow`: rows, and after the last of them one without rows (the end)."""

    def __init__(self, store: SliceStore, directory: str) -> None:
        self.store = store
        self.directory = directory

    def read(self, number: int) -> pa.Table | None:
        """Chunk ``number`` as published (no rows: the end), or None if no attempt published it."""
        try:
            return self.store._read_table(f"{self.directory}/{number:06d}.arrow")
        except FileNotFoundError:
            return None

    def publish(self, number: int, table: pa.Table) -> bool:
        """Publish chunk ``number``; False if another attempt published that number first."""
        return self.store.publish(self.directory, f"{number:06d}.arrow", table)

    def finish(self, number: int, schema: pa.Schema, rows: int) -> bool:
        """Publish the end as chunk ``number`` (``rows`` rows before it); False if that number is taken."""
        return self.publish(number, pa.Table.from_batches([], schema.with_metadata({_END_ROWS: str(rows).encode()})))
