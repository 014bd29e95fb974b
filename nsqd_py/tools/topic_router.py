"""nsq_to_file's per-topic loop (Go's `FileLogger.router`): messages go to the file, and are FINed only after
the sync that made their lines durable."""

from __future__ import annotations

import threading
import time

from ..client import Consumer, Message
from ..runtime.log import INFO
from .file_logger import FileLogger

#: how often a waiting router looks at its term/hup flags
_WAKE = 0.25
#: how long a stopping router waits for nsqd to answer CLS and for in-flight messages to settle
DRAIN_TIMEOUT = 30.0


class TopicRouter:
    """Drives one topic's Consumer into its FileLogger until `term` is set."""

    def __init__(self, consumer: Consumer, files: FileLogger, *, max_in_flight: int, sync_interval: float,
                 skip_empty_files: bool) -> None:
        self.consumer = consumer
        self.files = files
        self.max_in_flight = max_in_flight
        self.sync_interval = sync_interval
        self.skip_empty_files = skip_empty_files
        self.term = threading.Event()
        self.hup = threading.Event()
        self._pending: list[Message] = []

    def run(self) -> None:
        files, consumer = self.files, self.consumer
        next_tick = time.monotonic() + self.sync_interval
        drain_deadline = 0.0
        while True:
            sync = done = False
            now = time.monotonic()
            if self.term.is_set() and not consumer.stopping:
                consumer.stop()
                drain_deadline = now + DRAIN_TIMEOUT
                sync = True
            if self.hup.is_set():
                self.hup.clear()
                self._close_file()
            if not consumer.stopping and now >= next_tick:
                next_tick = now + self.sync_interval
                if files.needs_rotation():
                    if self.skip_empty_files:
                        self._close_file()  # the next message opens the next file
                    else:
                        files.update_file()
                sync = True
            if consumer.stopping and (consumer.drained or now >= drain_deadline):
                sync = done = True
            else:
                wait = _WAKE if consumer.stopping else min(_WAKE, max(0.0, next_tick - now))
                for msg in consumer.poll(wait):
                    if files.needs_rotation():
                        files.update_file()
                        sync = True
                    files.write(msg.body)
                    self._pending.append(msg)
                    if len(self._pending) >= self.max_in_flight:
                        sync = True
                    if sync:
                        self._sync()
                        sync = False
            # starvation is judged per batch: poll() counts a whole batch in flight before it is written;
            # while stopping, every batch is settled so the connections can drain
            if sync or consumer.stopping or consumer.is_starved():
                self._sync()
            if done:
                files.close()
                consumer.close()
                return

    def _close_file(self) -> None:
        """Close the file now (not after this round's messages, which would land in a file closed at once)."""
        self._sync()
        self.files.close()

    def _sync(self) -> None:
        """fsync the file, then FIN what it now holds."""
        if not self._pending:
            return
        self.files.log(INFO, f"syncing {len(self._pending)} records to disk")
        self.files.sync()
        for msg in self._pending:
            self.consumer.fin(msg)
        self._pending.clear()
