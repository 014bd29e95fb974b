"""The blocking half of a disk queue's full sync, run on a disk thread (runtime/disk_threads.py)."""

from __future__ import annotations

import contextlib
import os
import random

__all__ = ["persist"]


def persist(fsync_fds: list[int], dir_path: str | None, meta_path: str, meta: bytes,
            release: list[tuple[str, str | None]]) -> list[str]:
    """fsync the data files, then replace the meta file, then release files; returns errors from releasing files.

    Data files are fsynced before the meta file names their contents. Released files (the persisted read position
    has passed them) are removed, or renamed to ``.bad`` when they are given a name, only after the new meta is in
    place.
    """
    for fd in fsync_fds:
        os.fsync(fd)
    if dir_path is not None:  # a new data file's directory entry must survive a crash too
        dir_fd = os.open(dir_path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    tmp = f"{meta_path}.{random.getrandbits(63)}.tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            written = 0
            while written < len(meta):
                written += os.write(fd, meta[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, meta_path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    errors = []
    for path, bad_path in release:
        try:
            if bad_path is None:
                os.unlink(path)
            else:
                os.replace(path, bad_path)
        except FileNotFoundError:
            pass  # a missing file was already reported when the reader skipped it
        except OSError as err:
            errors.append(f"failed to {'Remove' if bad_path is None else 'rename'}({path}) - {err}")
    return errors
