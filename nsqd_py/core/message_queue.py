"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

MessageQueue: a memory queue bounded by --mem-queue-size that overflows into a disk queue.

Queued messages are parked (message.Parked: their record as bytes, or a plain tuple) rather than Message objects:
the cyclic GC does not track bytes, and untracks tuples of atomic values, so a backlog of millions of messages adds
nothing to a full collection (Message objects made every gen-2 pass walk the whole backlog: 300 ms+ stalls).
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from ..runtime.log import Logger
from .edges import BackendQueue
from .message import RECORD_HEADER, Message, Parked, decode_record, parked_record, unpark


class MessageQueue:
    """Memory first, disk when memory is full; pops alternate between the two so neither starves.

    A message read from disk carries the record's ack token; when such a message is written to
    disk again (requeue, flush) the old record is acked, since the new one now holds it.
    """

    __slots__ = ("_backend", "_log_name", "_logger", "_mem_size", "_memory", "_memory_bytes", "_take_backend_next")

    def __init__(self, backend: BackendQueue, mem_size: int, logger: Logger, log_name: str) -> None:
        self._backend = backend
        self._mem_size = mem_size
        self._memory: deque[Parked] = deque()
        self._memory_bytes = 0  # the records in memory, their sizes summed
        self._logger = logger
        self._log_name = log_name
        self._take_backend_next = False

    @property
    def backend(self) -> BackendQueue:
        return self._backend

    def __len__(self) -> int:
        return len(self._memory) + self._backend.depth()

    def __bool__(self) -> bool:
        return bool(self._memory) or self._backend.depth() > 0

    def backend_depth(self) -> int:
        return self._backend.depth()

    def body_bytes(self) -> int:
        """The queued messages' bodies, in memory and on disk, summed (what max_channel_bytes counts)."""
        return self._memory_bytes + self._backend.unread_bytes() - RECORD_HEADER * len(self)

    def push_parked(self, parked: Parked) -> bool:
        """Queue a message; True when it went to disk. BackendError when that write failed."""
        if len(self._memory) < self._mem_size:
            self._memory.append(parked)
            self._memory_bytes += len(parked) if isinstance(parked, bytes) else len(parked[0])
            return False
        self._write_parked(parked)
        return True

    def push_parked_batch(self, batch: list[Parked]) -> bool:
        """Queue messages in order: as many as fit into memory in one step, the rest to disk. True when any
        went to disk; BackendError when a write failed (the messages before it stay queued)."""
        room = max(0, self._mem_size - len(self._memory))
        if room >= len(batch):
            self._memory.extend(batch)
            self._memory_bytes += _records_size(batch)
            return False
        self._memory.extend(batch[:room])
        self._memory_bytes += _records_size(batch[:room])
        records: list[bytes] = []
        tokens: list[object] = []
        for parked in batch[room:]:
            record, token = parked_record(parked)
            records.append(record)
            if token is not None:
                tokens.append(token)
        self._backend.put_many(records)
        for token in tokens:
            self._backend.ack(token)
        return True

    def write_to_backend(self, msg: Message) -> None:
        self._backend.put(msg.encode())
        token = msg.token
        if token is not None:
            msg.token = None
            self._backend.ack(token)

    def _write_parked(self, parked: Parked) -> None:
        record, token = parked_record(parked)
        self._backend.put(record)
        if token is not None:
            self._backend.ack(token)

    def pop(self) -> Message | None:
        """The next message (a disk one carries its record's ack token)."""
        item = self.pop_parked()
        if item is None:
            return None
        msg = unpark(item[0])
        if item[1] is not None:
            msg.token = item[1]
        return msg

    def pop_parked(self) -> tuple[Parked, object] | None:
        """The next message still parked, and the ack token of its disk record (None from memory)."""
        take_backend = self._take_backend_next or not self._memory
        self._take_backend_next = not self._take_backend_next
        if take_backend:
            backend = self._backend
            while backend.depth():
                record = backend.read_one()
                if record is None:
                    break
                data, token = record
                try:
                    return decode_record(data), token
                except ValueError as err:
                    self._logger.error(f"{self._log_name}: failed to decode message - {err}")
                    backend.ack(token)
        if self._memory:
            parked = self._memory.popleft()
            self._memory_bytes -= len(parked) if isinstance(parked, bytes) else len(parked[0])
            return parked, None
        return None

    def peek(self, limit: int) -> list[tuple[Message, bool]]:
        """Up to ``limit`` of the next messages in the order pop_parked hands them out (memory and disk taking
        turns), each a new copy with whether it is on disk; nothing is popped, read off the disk or reordered."""
        memory = list(islice(self._memory, limit))
        disk: list[bytes] = []
        for data in self._backend.peek(limit):
            try:
                decode_record(data)
            except ValueError:
                continue  # pop_parked drops what it cannot decode and reads on
            disk.append(data)
        found: list[tuple[Message, bool]] = []
        take_backend = self._take_backend_next
        at_memory = at_disk = 0
        while len(found) < limit:
            if (take_backend or at_memory == len(memory)) and at_disk < len(disk):
                found.append((unpark(disk[at_disk]), True))
                at_disk += 1
            elif at_memory < len(memory):
                found.append((unpark(parked_record(memory[at_memory])[0]), False))
                at_memory += 1
            else:
                break
            take_backend = not take_backend
        return found

    def ack(self, token: object) -> None:
        self._backend.ack(token)

    def clear_memory(self) -> None:
        self._memory.clear()
        self._memory_bytes = 0

    def take_memory(self) -> list[Message]:
        """Everything in memory, emptied out (for the shutdown flush)."""
        parked = list(self._memory)
        self._memory.clear()
        self._memory_bytes = 0
        return [unpark(p) for p in parked]


def _records_size(batch: list[Parked]) -> int:
    total = 0
    for parked in batch:
        total += len(parked) if isinstance(parked, bytes) else len(parked[0])
    return total
