"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Where a disk queue resumes at start-up: its meta file, plus what Go would not salvage.

Go nsqd resumes from the meta file alone. We also keep data files that have no meta file, data files past the
meta file's writeFileNum and records past its writePos (written, and maybe acknowledged, after the last meta
rewrite), recounting the depth when we do. Writing always continues in a new file after a salvage, as Go does
after an unclean stop, so nothing is appended behind data the meta file does not describe.
"""

from __future__ import annotations

import contextlib
import os

from nsqd_py.runtime.log import Logger

from .format import QueueFiles, parse_meta

__all__ = ["Resume", "resume"]

#: depth, read file, read position, write file, write position, and whether the meta file must be rewritten
Resume = tuple[int, int, int, int, int, bool]


def _read_meta(files: QueueFiles, log: Logger) -> tuple[int, int, int, int, int] | None:
    try:
        with open(files.meta_path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        log.error(f"DISKQUEUE({files.name}) failed to retrieveMetaData - {err}")
        return None
    meta = parse_meta(raw)
    if isinstance(meta, str):
        log.error(f"DISKQUEUE({files.name}) failed to retrieveMetaData - {meta}")
        return None
    return meta


def resume(files: QueueFiles, log: Logger, data_files: list[int] | None = None) -> Resume:
    """The positions to resume from, salvaging data files without meta and unsynced tails. ``data_files``: the
    queue's data file numbers when the caller has listed the directory already (None: list it here)."""
    name = files.name
    meta = _read_meta(files, log)
    depth: int | None
    salvaged: bool | None
    changed = False
    if meta is None:
        found = files.data_files() if data_files is None else data_files
        if not found:
            return 0, 0, 0, 0, 0, False
        log.warn(f"DISKQUEUE({name}) no metadata, salvaging data files {found[0]:06d}..{found[-1]:06d}"
                 f", writing continues at {found[-1] + 1:06d}")
        rfile, rpos, wfile, wpos = found[0], 0, found[-1] + 1, 0
        depth = salvaged = None
    else:
        depth, rfile, rpos, wfile, wpos = meta
        salvaged = False
        beyond = wfile
        while files.size(beyond + 1) is not None:
            beyond += 1
        size = files.size(wfile)
        if beyond > wfile:
            log.warn(f"DISKQUEUE({name}) data files after writeFileNum {wfile} up to {beyond}, "
                     f"salvaging them and skipping to new file")
            wfile, wpos, salvaged = beyond + 1, 0, True
        elif size is not None and size > wpos:
            # Go's own handling of an unclean stop: write to a new file, read the old one to its real end
            log.warn(f"DISKQUEUE({name}) {files.data_file(wfile)} metadata writePos {wpos} < file size "
                     f"of {size}, skipping to new file")
            wfile, wpos, salvaged = wfile + 1, 0, True
        elif wpos > (size or 0):
            log.error(f"DISKQUEUE({name}) {files.data_file(wfile)} metadata writePos {wpos} > file size "
                      f"of {size or 0}, skipping to new file")
            wfile, wpos, salvaged = wfile + 1, 0, True
        if rfile > wfile or (rfile == wfile and rpos > wpos):
            log.error(f"DISKQUEUE({name}) read position {rfile},{rpos} > write position {wfile},{wpos}"
                      f", corruption, skipping to next writeFileNum and resetting 0...")
            for num in range(rfile, wfile + 1):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(files.data_file(num))
            rfile, rpos, wfile, wpos, depth, salvaged = wfile + 1, 0, wfile + 1, 0, 0, False
            changed = True
    if salvaged is not False:
        counted = files.count_records(rfile, rpos, wfile, wpos)
        if depth is not None:
            log.warn(f"DISKQUEUE({name}) depth recounted after salvage: {depth} -> {counted}")
        depth = counted
        changed = True
    assert depth is not None  # recounted above when the meta file had none
    return depth, rfile, rpos, wfile, wpos, changed
