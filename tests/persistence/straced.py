"""nsqd under `strace --inject` (Debian's strace; `make strace-deps`): the fault and slow-disk tests' server."""

from __future__ import annotations

import shutil
import signal
import subprocess
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
