"""The nsqadmin executable: `-h` is Go's text, `--version` our daemons' line, Go's start-up errors."""

from __future__ import annotations

import subprocess

import pytest

from nsqd_py.runtime.version import version_line
from tests.admin.conftest import NSQADMIN
from tests.admin.scenario import FIXTURES

pytestmark = pytest.mark.process


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NSQADMIN, *args], capture_output=True, text=True, timeout=30, check=False)


#: the flag blocks of `-h` beyond Go's nsqadmin (each a `-name type` line and its help line)
BEYOND_NSQADMIN_FLAGS = ("http-auth-secret",)


def test_usage_is_gos() -> None:
    """Go's text, plus our flags beyond nsqadmin's in their sorted places."""
    done = _run("-h")
    assert done.returncode == 0  # Go's flag.ExitOnError exits 0 for -h
    lines = done.stderr.splitlines(keepends=True)
    for flag in BEYOND_NSQADMIN_FLAGS:
        at = lines.index(f"  -{flag} string\n")
        del lines[at:at + 2]
    assert "".join(lines) == (FIXTURES / "usage.txt").read_text()


def test_version() -> None:
    done = _run("--version")
    assert (done.returncode, done.stdout) == (0, version_line("nsqadmin") + "\n")
    assert done.stdout.startswith("nsqadmin v1.3.0 (built w/python")


@pytest.mark.parametrize(("args", "error"), [
    ((), "--nsqd-http-address or --lookupd-http-address required"),
    (("--nsqd-http-address=127.0.0.1:4151", "--lookupd-http-address=127.0.0.1:4161"),
     "use --nsqd-http-address or --lookupd-http-address not both"),
    (("--nsqd-http-address=127.0.0.1:4151", "--http-client-tls-cert=c.pem"),
     "--http-client-tls-key must be specified with --http-client-tls-cert"),
])
def test_startup_errors_are_gos(args: tuple[str, ...], error: str) -> None:
    done = _run("--http-address=127.0.0.1:0", *args)
    assert done.returncode == 1
    assert done.stderr.startswith("[nsqadmin] ") and f"FATAL: failed to instantiate nsqadmin - {error}" in done.stderr
