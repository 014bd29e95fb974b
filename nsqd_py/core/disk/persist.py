"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

The blocking half of a disk queue's full sync, run on a disk thread (runtime/disk_threads.py)."""

from __future__ import annotations

import contextlib
import os

__all__ = ["persist", "replace_file"]


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
    replace_file(meta_path, meta, sync_dir=False)
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


def replace_file(path: str, data: bytes, sync_dir: bool) -> None:
    """Replace ``path`` atomically: write ``path``.tmp, fsync it, rename it over ``path``; with ``sync_dir``, fsync
    the directory too, so the rename survives a machine crash.

    The temporary name is fixed (Go adds a random number): a file's writers take turns, so a crash leaves at most one
    leftover, which the next write overwrites, and a fault test can aim at it (strace -P matches a rename by its
    source).
    """
    tmp = f"{path}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
