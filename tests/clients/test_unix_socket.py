"""A unix socket TCP listener (`--tcp-address=<path>`) speaking protocol V2."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.util import UnixConn
from tests.support import FRAME_RESPONSE, NsqdProcess, mpub_body


class UnixNsqd(NsqdProcess):
    """nsqd whose TCP listener is a unix socket; ready once the socket accepts connections."""

    def __init__(self, data_path: Path, sock_path: str) -> None:
        super().__init__(data_path, f"--tcp-address={sock_path}")
        self.sock_path = sock_path

    def start(self, timeout: float = 20) -> UnixNsqd:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        import subprocess

        self.proc = subprocess.Popen(self.args(), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nsqd exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.sock_path)
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nsqd did not listen on {self.sock_path}:\n{self.log()}")


@pytest.fixture
def unix_nsqd(tmp_path: Path) -> Iterator[UnixNsqd]:
    sock_dir = tempfile.mkdtemp(prefix="nsqd", dir="/tmp")  # short: unix socket paths are limited to ~107 bytes
    proc = UnixNsqd(tmp_path / "data", os.path.join(sock_dir, "nsqd.sock")).start()
    yield proc
    proc.stop()
    shutil.rmtree(sock_dir, ignore_errors=True)


def test_pub_sub_over_unix_socket(unix_nsqd: UnixNsqd) -> None:
    """IDENTIFY, SUB, RDY, PUB, MPUB, FIN all work over AF_UNIX."""
    sub = UnixConn(unix_nsqd.sock_path)
    publisher = UnixConn(unix_nsqd.sock_path)
    try:
        reply = sub.identify(heartbeat_interval=1000)
        assert isinstance(reply, dict) and reply["max_rdy_count"] == 2500
        assert sub.sub("unix_t", "ch") == (FRAME_RESPONSE, b"OK")
        sub.send("RDY 10")
        publisher.send("PUB unix_t", b"over a unix socket")
        assert publisher.frame() == (FRAME_RESPONSE, b"OK")
        publisher.send("MPUB unix_t", mpub_body([b"m1", b"m2"]))
        assert publisher.frame() == (FRAME_RESPONSE, b"OK")
        got = [sub.message() for _ in range(3)]
        assert sorted(m.body for m in got) == [b"m1", b"m2", b"over a unix socket"]
        assert {m.attempts for m in got} == {1}
        for m in got:
            sub.send(f"FIN {m.id.decode()}")
        sub.send("PUB unix_t2", b"x")  # proves the FINs were accepted (an error would arrive first)
        assert sub.frame() == (FRAME_RESPONSE, b"OK")
    finally:
        sub.close()
        publisher.close()


def test_unix_socket_path_removed_or_reusable_after_restart(tmp_path: Path) -> None:
    """A stale socket file from a previous run does not prevent the next start."""
    sock_dir = tempfile.mkdtemp(prefix="nsqd", dir="/tmp")
    path = os.path.join(sock_dir, "nsqd.sock")
    try:
        first = UnixNsqd(tmp_path / "d1", path).start()
        first.stop(sig=9)  # leaves the socket file behind
        second = UnixNsqd(tmp_path / "d2", path).start()
        try:
            conn = UnixConn(path)
            conn.send("PUB t", b"y")
            assert conn.frame() == (FRAME_RESPONSE, b"OK")
            conn.close()
        finally:
            second.stop()
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
