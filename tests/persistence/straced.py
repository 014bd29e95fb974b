"""nsqd under `strace --inject` (Debian's strace; `make strace-deps`): the fault and slow-disk tests' server."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import NSQD_BIN, NsqdProcess

needs_strace = pytest.mark.skipif(shutil.which("strace") is None,
                                  reason="needs strace (make strace-deps installs Debian's)")


class StracedNsqd(NsqdProcess):
    """nsqd under strace, which tampers with the matching ``calls`` on ``path`` as ``inject`` says (strace's
    --inject syntax after the calls, e.g. ``error=EIO:when=3`` or ``delay_exit=2000000``)."""

    def __init__(self, data_path: Path, calls: str, path: Path, inject: str, *flags: str) -> None:
        super().__init__(data_path, *flags)
        self.strace = ["strace", "-f", "-qq", "--seccomp-bpf", "-o", "/dev/null", "-P", str(path),
                       f"--trace={calls}", f"--inject={calls}:{inject}"]

    def command(self) -> list[str]:
        return [*self.strace, str(NSQD_BIN)]

    def stop(self, timeout: float = 30.0, sig: int = signal.SIGTERM) -> int | None:
        """The signal goes to nsqd itself (strace would only detach); strace exits with nsqd's status."""
        if self.process is not None and self.process.poll() is None:
            children = subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True)
            for pid in children.stdout.split():
                subprocess.run(["kill", f"-{sig}", pid], check=False)
        return super().stop(timeout, sig)


class AttachedStrace:
    """strace attached to every thread of a running process, making the matching ``calls`` on ``path`` fail with
    ``error`` until it detaches: a fault that lasts a while, after a clean start."""

    def __init__(self, pid: int, calls: str, path: Path, error: str) -> None:
        self.pid = pid
        self.command = ["strace", "-f", "-qq", "-o", "/dev/null", "-p", str(pid), "-P", str(path),
                        f"--trace={calls}", f"--inject={calls}:error={error}"]
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> AttachedStrace:
        self.process = subprocess.Popen(self.command)
        deadline = time.monotonic() + 10
        while not self._attached():
            assert time.monotonic() < deadline, "strace did not attach"
            time.sleep(0.05)
        return self

    def _attached(self) -> bool:
        """Every thread of the process has a tracer."""
        tasks = Path(f"/proc/{self.pid}/task")
        return all("TracerPid:\t0\n" not in (task / "status").read_text() for task in tasks.iterdir())

    def __exit__(self, *exc: object) -> None:
        """Detach: strace lets go of every thread on SIGTERM."""
        assert self.process is not None
        self.process.terminate()
        self.process.wait(10)
