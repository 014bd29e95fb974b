"""Where a query started: `startingOffsets` is applied once, as Kafka's source records its starting offsets in the
checkpoint once and never applies them again.

A Python data source cannot see the query's checkpoint, so the record lives in the write-ahead location (which the
docs put beside the checkpoint): one small file per channel and set of topics,

    LOCATION/_starts/<key>.json

written before the first start empties anything. Spark calls `initialOffset` again when a query restarts before its
first batch committed (the driver died before batch 0 committed, or before any batch was logged); finding the record
then, the reader continues where the channel is instead of emptying it a second time, which would drop everything
published since the first start and what a killed batch still held in flight.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time

import pyarrow.fs as pafs

from .options import ReadOptions

log = logging.getLogger(__name__)

#: the location's directory of start records, beside the queries' directories
STARTS_DIR = "_starts"


class StartRecord:
    """The record of the first start of the reads of ``opts.channel`` of these topics in one write-ahead location."""

    def __init__(self, fs: pafs.FileSystem, directory: str, opts: ReadOptions) -> None:
        """``directory``: the location's `STARTS_DIR`, as ``fs`` names it."""
        self.fs = fs
        self.identity = {"channel": opts.channel, "topics": sorted(opts.topics), "pattern": opts.subscribe_pattern}
        key = hashlib.sha256(json.dumps(self.identity, sort_keys=True).encode()).hexdigest()[:32]
        self.directory = directory
        self.path = f"{self.directory}/{key}.json"

    def read(self) -> dict | None:
        """What the first start recorded, or None before any start."""
        try:
            with self.fs.open_input_stream(self.path) as source:
                return json.loads(source.read())
        except FileNotFoundError:
            return None

    def write(self, starting_offsets: str, replays: dict | None = None) -> None:
        """Record the start durably: before anything is emptied (latest), so a crash right after it leaves the
        channel as it is (read as with earliest), never emptied twice; after the channels replaying history were
        made (history.py), whose answers ``replays`` holds: a crash before it finds them made, and reads them as
        they are."""
        record: dict[str, object] = {**self.identity, "startingOffsets": starting_offsets,
                                     "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if replays:
            record["replays"] = replays
        content = json.dumps(record).encode()
        self.fs.create_dir(self.directory, recursive=True)
        if isinstance(self.fs, pafs.LocalFileSystem):
            _write_durably(self.path, content)
        else:  # an object store's or HDFS's write is durable once closed
            with self.fs.open_output_stream(self.path) as out:
                out.write(content)


def _write_durably(path: str, content: bytes) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as out:
        out.write(content)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    directory = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
