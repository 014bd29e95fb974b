"""One topic's output file for nsq_to_file: open with nsq_to_file's naming/revision rules, write lines, sync,
rotate, and move finished files from the work dir to the output dir.

Lines are kept in memory until `sync()`, which writes them (as one complete gzip member with --gzip) and
fsyncs. So the file on disk only ever holds whole lines and whole gzip members: after a kill -9 it is still
readable, and the lines that were lost were never FINed, so nsqd delivers them again.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from ..go.durations import SECOND, format_duration
from ..runtime.log import INFO, WARN
from .filenames import current_filename, with_rev

LogFunc = Callable[[int, str], None]


class FatalError(Exception):
    """nsq_to_file's `FATAL` conditions (it exits 1 without FINing anything)."""


@dataclass(frozen=True)
class FileOptions:
    output_dir: str
    work_dir: str
    datetime_format: str = "%Y-%m-%d_%H"
    gzip: bool = False
    gzip_level: int = 6
    rotate_size: int = 0
    rotate_interval: int = 0  # ns
    skip_empty_files: bool = False


def go_os_error(op: str, path: str, err: OSError) -> str:
    """Go's `*PathError` text, e.g. `open /x/y.log: permission denied`."""
    reason = err.strerror or str(err)
    return f"{op} {path}: {reason[:1].lower()}{reason[1:]}"


class FileLogger:
    """The current output file of one topic (``template`` = the file name with <DATETIME>/<REV> unfilled)."""

    def __init__(self, opts: FileOptions, template: str, log: LogFunc, tag: str) -> None:
        self.opts = opts
        self.template = template
        self._log = log
        self._tag = tag  # "[topic/channel]"
        self.filename = ""  # <DATETIME> filled, <REV> not
        self.path = ""
        self.rev = 0
        self.filesize = 0
        self._fd: int | None = None
        self._open_time = 0.0
        self._pending: list[bytes] = []
        self._members = 0  # gzip members written to this file

    def log(self, level: int, msg: str) -> None:
        self._log(level, f"{self._tag} {msg}")

    def write(self, body: bytes) -> None:
        """Queue one line; it reaches the disk at the next `sync()`."""
        self._pending.append(body)
        self._pending.append(b"\n")
        self.filesize += len(body) + 1

    def sync(self) -> None:
        """Write the queued lines (one finished gzip member with --gzip) and fsync."""
        if self._fd is None:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        if self.opts.gzip and data:
            data = _gzip_member(data, self.opts.gzip_level)
            self._members += 1
        try:
            self._write_all(data)
            os.fsync(self._fd)
        except OSError as err:
            raise FatalError(f"{self._tag} failed syncing messages: {go_os_error('write', self.path, err)}") from err

    def needs_rotation(self) -> bool:
        if self._fd is None:
            return True
        filename = current_filename(self.template, self.opts.datetime_format)
        if filename != self.filename:
            self.log(INFO, f"new filename {filename}, rotating...")
            return True
        elapsed = time.monotonic() - self._open_time
        if self.opts.rotate_interval > 0 and elapsed * SECOND > self.opts.rotate_interval:
            self.log(INFO, f"{format_duration(int(elapsed * SECOND))} since last open, rotating...")
            return True
        if self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size:
            self.log(INFO, f"{self.path} currently {self.filesize} bytes (> {self.opts.rotate_size}), rotating...")
            return True
        return False

    def update_file(self) -> None:
        """Close the current file and open the next one (same name: next <REV>; new <DATETIME>: rev 0)."""
        self.close()
        filename = current_filename(self.template, self.opts.datetime_format)
        self.rev = 0 if filename != self.filename else self.rev + 1
        self.filename = filename
        self._open_time = time.monotonic()
        full = os.path.join(self.opts.work_dir, filename)
        self._mkdirs(full)
        exclusive = self.opts.gzip or self.opts.rotate_interval > 0
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_APPEND)
        while True:
            path = with_rev(full, self.rev)
            if self.opts.work_dir != self.opts.output_dir:
                final = self._output_name(path)
                self._mkdirs(final)
                if os.path.lexists(final):
                    self.log(WARN, f"output file already exists: {final}")
                    self.rev += 1
                    continue
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                self.log(WARN, f"working file already exists: {path}")
                self.rev += 1
                continue
            except OSError as err:
                raise FatalError(f"{self._tag} unable to open {path}: {go_os_error('open', path, err)}") from err
            self.log(INFO, f"opening {path}")
            size = os.fstat(fd).st_size
            if self.opts.rotate_size > 0 and size > self.opts.rotate_size:
                self.log(INFO, f"{path} currently {size} bytes (> {self.opts.rotate_size}), rotating...")
                os.close(fd)
                self.rev += 1
                continue
            self._fd, self.path, self.filesize, self._members = fd, path, size, 0
            return

    def close(self) -> None:
        """Sync, close, and move the file to the output dir when a work dir is used."""
        if self._fd is None:
            return
        self.sync()
        if self.opts.gzip and self._members == 0 and os.fstat(self._fd).st_size == 0:
            self._write_all(_gzip_member(b"", self.opts.gzip_level))  # an empty file is not valid gzip
            os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        if self.opts.work_dir != self.opts.output_dir:
            self._move(self.path)

    def _move(self, src: str) -> None:
        dst = self._output_name(src)
        self.log(INFO, f"moving finished file {src} to {dst}")
        try:
            _exclusive_rename(src, dst)
            return
        except FileExistsError:
            pass
        except OSError as err:
            raise FatalError(f"{self._tag} unable to move file from {src} to {dst}: "
                             f"{go_os_error('link', src, err)}") from err
        template = os.path.join(os.path.dirname(dst), os.path.basename(self.filename))
        rev = self.rev + 1
        while True:
            self.log(WARN, f"destination file already exists: {dst}")
            dst = with_rev(template, rev)
            try:
                _exclusive_rename(src, dst)
            except FileExistsError:
                rev += 1
                continue
            except OSError as err:
                raise FatalError(f"{self._tag} unable to rename file from {src} to {dst}: "
                                 f"{go_os_error('link', src, err)}") from err
            self.log(INFO, f"renamed finished file {src} to {dst} to avoid overwrite")
            return

    def _output_name(self, work_path: str) -> str:
        """The work-dir path re-rooted in the output dir (Go: Join(OutputDir, TrimPrefix(path, WorkDir)))."""
        rest = work_path[len(self.opts.work_dir) :] if work_path.startswith(self.opts.work_dir) else work_path
        return os.path.normpath(self.opts.output_dir + "/" + rest)

    def _mkdirs(self, path: str) -> None:
        directory = os.path.dirname(path)
        if not directory:
            return
        try:
            os.makedirs(directory, 0o770, exist_ok=True)
        except OSError as err:
            raise FatalError(f"{self._tag} unable to create dir: {go_os_error('mkdir', directory, err)}") from err

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)  # type: ignore[arg-type]
            view = view[written:]


def _gzip_member(data: bytes, level: int) -> bytes:
    """One complete gzip member (header, deflate stream, CRC and size trailer)."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush(zlib.Z_FINISH)


def _exclusive_rename(src: str, dst: str) -> None:
    """Hard link then unlink, so an existing ``dst`` is never replaced (FileExistsError instead)."""
    os.link(src, dst)
    os.unlink(src)
