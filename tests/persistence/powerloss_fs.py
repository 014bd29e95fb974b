"""A FUSE filesystem that loses, at "power loss", every write no completed fsync covers (what LazyFS does for
Jepsen), for tests/persistence/test_power_loss.py.

    python powerloss_fs.py BACKING MOUNTPOINT STATS_FILE

Files live in BACKING. A write is held in this process's memory (the "page cache"); fsync or fdatasync of the file
writes its held data to BACKING and fsyncs it there. Unmounting is the power loss: the held writes are dropped,
and how many bytes were dropped is written to STATS_FILE. Namespace changes (create, rename, unlink, truncate)
reach BACKING at once: this model loses data, not directory entries. Mounted with direct_io and no attribute
caching, so the kernel keeps no copy that would outlive the "crash".
"""

from __future__ import annotations

import errno
import os
import sys
import threading

from fuse import FUSE, FuseOSError, Operations


class PowerLossFS(Operations):
    def __init__(self, backing: str, stats_file: str) -> None:
        self.backing = backing
        self.stats_file = stats_file
        #: path -> held writes in order: (offset, data)
        self.held: dict[str, list[tuple[int, bytes]]] = {}
        self._mutex = threading.Lock()

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _held_size(self, path: str) -> int:
        return max((offset + len(data) for offset, data in self.held.get(path, ())), default=0)

    # ---- namespace ---------------------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict:
        try:
            st = os.lstat(self._real(path))
        except FileNotFoundError:
            raise FuseOSError(errno.ENOENT) from None
        attrs = {key: getattr(st, key) for key in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_atime",
                                                   "st_mtime", "st_ctime")}
        with self._mutex:
            attrs["st_size"] = max(st.st_size, self._held_size(path))
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._real(path), mode)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._real(path))

    def unlink(self, path: str) -> None:
        with self._mutex:
            os.unlink(self._real(path))
            self.held.pop(path, None)

    def rename(self, old: str, new: str) -> None:
        with self._mutex:
            os.rename(self._real(old), self._real(new))
            moved = self.held.pop(old, None)
            self.held.pop(new, None)
            if moved is not None:
                self.held[new] = moved

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._real(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._real(path), uid, gid)

    def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
        os.utime(self._real(path), times)

    def statfs(self, path: str) -> dict:
        st = os.statvfs(self._real(path))
        return {key: getattr(st, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                  "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    # ---- data ----------------------------------------------------------------------------------------

    def create(self, path: str, mode: int, fi: object = None) -> int:
        fd = os.open(self._real(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        os.close(fd)
        return 0

    def open(self, path: str, flags: int) -> int:
        if not os.path.exists(self._real(path)):
            raise FuseOSError(errno.ENOENT)
        if flags & os.O_TRUNC:
            self.truncate(path, 0)
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:  # an fsync moving held writes to BACKING meanwhile would hide them from this read
            with open(self._real(path), "rb") as f:
                f.seek(offset)
                data = bytearray(f.read(size))
            for start, chunk in self.held.get(path, ()):
                lo, hi = max(start, offset), min(start + len(chunk), offset + size)
                if lo >= hi:
                    continue
                if len(data) < hi - offset:
                    data.extend(b"\0" * (hi - offset - len(data)))
                data[lo - offset : hi - offset] = chunk[lo - start : hi - start]
        return bytes(data)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            self.held.setdefault(path, []).append((offset, bytes(data)))
        return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        self._apply(path)
        os.truncate(self._real(path), length)

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        self._apply(path)

    def flush(self, path: str, fh: int) -> None:
        return None

    def release(self, path: str, fh: int) -> None:
        return None

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        return None

    def _apply(self, path: str) -> None:
        """What an fsync makes durable: the file's held writes, written and synced in BACKING (under the lock, so
        a read sees them either held or written)."""
        with self._mutex:
            writes = self.held.pop(path, [])
            if not writes:
                return
            fd = os.open(self._real(path), os.O_WRONLY)
            try:
                for offset, chunk in writes:
                    os.pwrite(fd, chunk, offset)
                os.fsync(fd)
            finally:
                os.close(fd)

    def destroy(self, path: str) -> None:
        """Unmounted: the power went. Every held write is lost."""
        with self._mutex:
            dropped = sum(len(chunk) for writes in self.held.values() for _, chunk in writes)
            self.held.clear()
        with open(self.stats_file, "a") as stats:
            stats.write(f"{dropped}\n")


def main() -> None:
    backing, mountpoint, stats_file = sys.argv[1:4]
    FUSE(PowerLossFS(backing, stats_file), mountpoint, foreground=True, direct_io=True, attr_timeout=0,
         entry_timeout=0, negative_timeout=0, nothreads=False)


if __name__ == "__main__":
    main()
