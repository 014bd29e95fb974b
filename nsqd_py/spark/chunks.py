"""How the attempts of one slice agree on each chunk: exactly one offer wins a chunk number, on any storage.

Local and NFS paths (`LinkedChunks`): an offer is written, fsynced and hard-linked to ``<n>.arrow``; `link` fails
when the name exists, so the first offer wins.

Other pyarrow filesystems (`AgreedChunks`): HDFS's and S3's moves replace their target, and nothing in pyarrow.fs
creates a file only if it is absent, so no single call can decide. Each attempt instead writes files of its own,
named by a fresh id, in ``<n>/`` and runs Gafni's adopt-commit rounds over them (agreement that needs only
read-after-write consistent listings, as S3, HDFS, GCS and Azure give):

    <id>.arrow            an attempt's offer
    r<k>.p.<id>.<value>   round k: attempt <id> proposes offer <value>
    r<k>.b.<id>.<verdict>.<value>  round k: it saw only <value> proposed (commit) or not (adopt)
    decided.<value>       written by whoever saw every round-k verdict commit <value>

A value committed in a round is adopted by everyone who finishes that round, so no later round can decide another:
whoever decides, decides the same offer. A crashed attempt's files never block the others (nobody waits for them);
attempts that keep colliding back off at random.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs

_END_PREFIX = "nsq.slice."
#: pause between rounds of attempts that keep colliding, times the round number (capped)
_BACKOFF_SECONDS = 0.02


def read_table(fs: pafs.FileSystem, path: str) -> pa.Table:
    with fs.open_input_file(path) as source:
        return pa.ipc.open_file(source).read_all()


#: the end's record of how many data chunks come before it (what the slice holds, not a count of the attempt's)
_CHUNKS_KEY = f"{_END_PREFIX}chunks".encode()


def end_metadata(chunks: int, rows: int, counts: dict[str, int]) -> dict[bytes, bytes]:
    """The end chunk's schema metadata: the data chunks and rows before it, and the finishing attempt's counts."""
    metadata = {f"{_END_PREFIX}{key}".encode(): str(value).encode() for key, value in {"rows": rows, **counts}.items()}
    return {**metadata, _CHUNKS_KEY: str(chunks).encode()}


def end_counts(table: pa.Table) -> dict[str, int]:
    """The rows and the finishing attempt's counts `end_metadata` stored (``rows`` is 0 when missing)."""
    counts = {"rows": 0}
    for key, value in (table.schema.metadata or {}).items():
        name = key.decode()
        if name.startswith(_END_PREFIX) and key != _CHUNKS_KEY:
            counts[name.removeprefix(_END_PREFIX)] = int(value)
    return counts


def end_chunks(table: pa.Table) -> int | None:
    """The data chunks `end_metadata` recorded; None for an end written before the count was recorded."""
    value = (table.schema.metadata or {}).get(_CHUNKS_KEY)
    return None if value is None else int(value)


def _serialize(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


class ChunkStore(Protocol):
    #: an offer can be seen before it is durable, so a publish that failed after storing it leaves its durability
    #: unknown (the directory's fsync follows the link)
    visible_before_durable: bool

    def read(self, directory: str, number: int) -> pa.Table | None: ...

    def publish(self, directory: str, number: int, table: pa.Table) -> bool: ...

    def numbers(self, directory: str) -> list[int]:
        """The chunk numbers offered so far, in order."""


class LinkedChunks:
    """A local (or NFS) slice: ``<n>.arrow`` files, won by `os.link`."""

    visible_before_durable = True

    def __init__(self) -> None:
        self.fs = pafs.LocalFileSystem()

    def numbers(self, directory: str) -> list[int]:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return sorted(int(name[:-6]) for name in names if name.endswith(".arrow") and name[:-6].isdigit())

    def read(self, directory: str, number: int) -> pa.Table | None:
        try:
            return read_table(self.fs, os.path.join(directory, f"{number:06d}.arrow"))
        except FileNotFoundError:
            return None

    def publish(self, directory: str, number: int, table: pa.Table) -> bool:
        """Write, fsync, then hard-link into place. The directory is never created here: when it is gone the batch
        was retired, and the offer loses."""
        final = os.path.join(directory, f"{number:06d}.arrow")
        temporary = os.path.join(directory, f".{number:06d}.{uuid.uuid4().hex}.tmp")
        try:
            out = open(temporary, "xb")  # noqa: SIM115 - closed below, before the link
        except FileNotFoundError:
            return False
        with out:
            out.write(memoryview(_serialize(table)))
            out.flush()
            os.fsync(out.fileno())
        try:
            if not _link(temporary, final):
                return False
        finally:
            os.unlink(temporary)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return True


def _link(temporary: str, final: str) -> bool:
    """Hard-link our offer to the chunk's name: False if another offer holds it. Over NFS a LINK whose reply was
    lost is sent again, and the retry answers EEXIST although the first one linked: the name then holds our own
    file (the temporary's inode), and the offer won."""
    try:
        os.link(temporary, final)
    except FileExistsError:
        return os.path.samefile(temporary, final)
    return True


class AgreedChunks:
    """A slice on a filesystem without an exclusive create: chunk ``<n>/`` holds offers and adopt-commit rounds."""

    #: an offer shows only once its write completed, and these stores keep what they show
    visible_before_durable = False

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs

    def numbers(self, directory: str) -> list[int]:
        infos = self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        return sorted(int(info.base_name) for info in infos
                      if info.type == pafs.FileType.Directory and info.base_name.isdigit())

    def read(self, directory: str, number: int) -> pa.Table | None:
        """The winning offer; when offers exist but none has won yet, this call takes part in deciding."""
        chunk = f"{directory}/{number:06d}"
        names = self._names(chunk)
        offers = sorted(name.removesuffix(".arrow") for name in names if name.endswith(".arrow"))
        if not offers:
            return None
        winner = self._decided(names) or self._agree(chunk, uuid.uuid4().hex, offers[0])
        return read_table(self.fs, f"{chunk}/{winner}.arrow")

    def publish(self, directory: str, number: int, table: pa.Table) -> bool:
        if self.fs.get_file_info(directory).type != pafs.FileType.Directory:
            return False  # the batch was retired: never recreate it
        chunk, me = f"{directory}/{number:06d}", uuid.uuid4().hex
        self.fs.create_dir(chunk, recursive=False)
        temporary = f"{chunk}/.{me}.tmp"
        with self.fs.open_output_stream(temporary) as out:
            out.write(_serialize(table))
        self.fs.move(temporary, f"{chunk}/{me}.arrow")  # a fresh name: nothing to replace
        return self._agree(chunk, me, me) == me

    def _agree(self, chunk: str, me: str, proposal: str) -> str:
        """Adopt-commit rounds until one offer is decided; returns it."""
        round_ = 1
        while True:
            names = self._names(chunk)
            decided = self._decided(names)
            if decided:
                return decided
            self._touch(f"{chunk}/r{round_}.p.{me}.{proposal}")
            proposed = {name.split(".")[3] for name in self._names(chunk) if name.startswith(f"r{round_}.p.")}
            verdict = "commit" if proposed == {proposal} else "adopt"
            self._touch(f"{chunk}/r{round_}.b.{me}.{verdict}.{proposal}")
            votes = [tuple(name.split(".")[3:5]) for name in self._names(chunk) if name.startswith(f"r{round_}.b.")]
            if all(vote == ("commit", proposal) for vote in votes):
                self._touch(f"{chunk}/decided.{proposal}")
                return proposal
            committed = [value for verdict, value in votes if verdict == "commit"]
            if committed:  # at most one value can be committed in a round
                proposal = committed[0]
            round_ += 1
            time.sleep(random.uniform(0, _BACKOFF_SECONDS * min(round_, 10)))

    def _names(self, chunk: str) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(chunk, allow_not_found=True))
        return [info.base_name for info in infos if info.type == pafs.FileType.File]

    @staticmethod
    def _decided(names: list[str]) -> str | None:
        return next((name.removeprefix("decided.") for name in names if name.startswith("decided.")), None)

    def _touch(self, path: str) -> None:
        with self.fs.open_output_stream(path):
            pass
