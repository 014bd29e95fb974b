"""The write side that the stores beyond nsqd share (deferred_store.py, retained_log.py): files appended to beside the
disk queues, made durable by a group commit round of the acks (acks.py calls ``sync_data``) or by ``sync``."""

from __future__ import annotations

import contextlib
import os

from nsqd_py.runtime.disk_threads import run_blocking
from nsqd_py.runtime.log import Logger

from ..errors import BackendError
from .acks import QueueCommits

__all__ = ["AppendedFiles", "sync_files"]


class AppendedFiles:
    """The file being appended to, the ones left behind (fsynced and closed by the next sync), and whether the
    directory changed (a new file's entry must survive a crash too)."""

    def __init__(self, log_name: str, what: str, data_path: str, logger: Logger) -> None:
        self._log_name = log_name  # `DEFERRED(t:c)`: how the log names it
        self._what = what  # `deferred store t:c`: how an error names it
        self._data_path = data_path
        self._log = logger
        #: the group commit rounds (acks.py keeps them here)
        self.commits: QueueCommits | None = None
        self._fd: int | None = None
        self._unsynced_fds: list[int] = []
        self._dir_dirty = False
        self._closed = False
        self._syncing = False  # a disk thread is syncing: descriptors closed meanwhile wait for it (_close_later)
        self._close_later: list[int] = []

    def _retire_fd(self) -> int | None:
        """Stop appending to the current file: the next sync makes it durable and closes it. Its descriptor."""
        fd = self._fd
        if fd is not None:
            self._unsynced_fds.append(fd)
            self._fd = None
        return fd

    def sync_data(self) -> None:
        """Make everything appended so far durable; BackendError on failure."""
        if self._closed:
            return
        released = self._unsynced_fds
        fds = [*released, *([self._fd] if self._fd is not None else [])]
        sync_dir = self._dir_dirty
        if not fds and not sync_dir:
            return
        self._unsynced_fds = []
        self._dir_dirty = False
        self._syncing = True
        try:
            run_blocking(sync_files, fds, self._data_path if sync_dir else None)
        except OSError as err:
            self._dir_dirty = self._dir_dirty or sync_dir
            raise BackendError(f"failed to sync {self._what} - {err}") from err
        finally:
            self._syncing = False
            for fd in [*released, *self._close_later]:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._close_later = []

    def sync(self) -> None:
        """sync_data, with its failure logged (for a caller that needs no answer: a topic's read position, close)."""
        try:
            self.sync_data()
        except BackendError as err:
            self._log.error(f"{self._log_name}: {err}")

    def _close_files(self) -> None:
        """Close every descriptor; one a sync under way is using is closed when it returns (an EBADF would fail the
        publishes waiting for that round)."""
        fds = [*self._unsynced_fds, *([self._fd] if self._fd is not None else [])]
        self._unsynced_fds = []
        self._fd = None
        if self._syncing:
            self._close_later.extend(fds)
            return
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def sync_files(fds: list[int], dir_path: str | None) -> None:
    """fdatasync the files, then fsync the directory (when given), on the calling (disk) thread."""
    for fd in fds:
        os.fdatasync(fd)
    if dir_path is not None:
        dir_fd = os.open(dir_path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
