"""The systemd integration: nsqd's READY=1/STOPPING=1 datagrams, and the unit/sysusers/tmpfiles files."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support import NSQD_BIN, REPO, NsqdProcess

pytestmark = pytest.mark.process  # starts real processes: left out of `make check`

SYSTEMD = REPO / "systemd"


def test_nsqd_notifies_ready_after_listening_and_stopping_on_sigterm(tmp_path: Path) -> None:
    notify_path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(notify_path))
        sock.settimeout(20)
        nsqd = NsqdProcess(tmp_path / "data")
        with open(tmp_path / "nsqd.log", "wb") as log:
            proc = subprocess.Popen(nsqd.args(), env={**os.environ, "NOTIFY_SOCKET": str(notify_path)},
                                    stdout=log, stderr=subprocess.STDOUT)
            try:
                ready = sock.recv(4096).decode().split("\n")
                assert ready[:2] == ["READY=1", f"MAINPID={proc.pid}"]
                socket.create_connection(("127.0.0.1", nsqd.tcp_port), timeout=1).close()  # already listening
                socket.create_connection(("127.0.0.1", nsqd.http_port), timeout=1).close()
                proc.send_signal(signal.SIGTERM)
                assert sock.recv(4096) == b"STOPPING=1"
                assert proc.wait(20) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def test_unit_declares_what_the_issue_asks_for() -> None:
    unit = (SYSTEMD / "nsqd.service").read_text()
    for line in ("Type=notify", "ExecStart=/usr/bin/nsqd --config /etc/nsqd/nsqd.toml", "User=nsqd",
                 "Restart=on-failure", "LimitNOFILE=65536", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "ReadWritePaths=/var/lib/nsqd", "PrivateTmp=yes", "TimeoutStopSec=300"):
        assert f"\n{line}\n" in unit, line


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """verify insists that ExecStart exists, so point the copy at the nsqd we test."""
    unit = (SYSTEMD / "nsqd.service").read_text().replace("/usr/bin/nsqd", str(NSQD_BIN))
    (tmp_path / "nsqd.service").write_text(unit)
    out = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "nsqd.service")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "nsqd.service" not in out.stderr, out.stderr


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="systemd-sysusers not installed")
def test_sysusers_and_tmpfiles_apply_to_a_scratch_root(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    dry = subprocess.run(["systemd-sysusers", "--dry-run", f"--root={tmp_path}", str(SYSTEMD / "nsqd.sysusers.conf")],
                         capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and "Creating user 'nsqd'" in dry.stderr + dry.stdout, dry.stderr
    if os.geteuid() != 0 or shutil.which("systemd-tmpfiles") is None:
        pytest.skip("creating the tmpfiles directories with their owners needs root")
    subprocess.run(["systemd-sysusers", f"--root={tmp_path}", str(SYSTEMD / "nsqd.sysusers.conf")], check=True,
                   capture_output=True, timeout=60)
    subprocess.run(["systemd-tmpfiles", "--create", f"--root={tmp_path}", str(SYSTEMD / "nsqd.tmpfiles.conf")],
                   check=True, capture_output=True, timeout=60)
    data = tmp_path / "var/lib/nsqd"
    assert data.is_dir() and oct(data.stat().st_mode & 0o777) == "0o750"
    assert (tmp_path / "etc/nsqd").is_dir()
