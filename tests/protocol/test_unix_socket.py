"""A unix socket TCP listener (`--tcp-address=<path>`) speaking protocol V2."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqd_py.client.protocol import mpub_body
from tests.protocol.raw import unix_conn
from tests.support import FRAME_RESPONSE, NSQD_BIN, NsqdProcess


class UnixNsqd(NsqdProcess):
    """nsqd whose TCP listener is a unix socket (the later --tcp-address flag wins)."""

    def __init__(self, data_path: Path, sock_path: str) -> None:
        super().__init__(data_path, f"--tcp-address={sock_path}")
        self.sock_path = sock_path

    def _connect_tcp(self) -> None:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(self.sock_path)


@pytest.fixture
def unix_nsqd(tmp_path: Path) -> Iterator[UnixNsqd]:
    sock_dir = tempfile.mkdtemp(prefix="nsqd", dir="/tmp")  # short: unix socket paths are limited to ~107 bytes
    proc = UnixNsqd(tmp_path / "data", os.path.join(sock_dir, "nsqd.sock")).start()
    yield proc
    proc.stop()
    shutil.rmtree(sock_dir, ignore_errors=True)


def test_pub_sub_over_unix_socket(unix_nsqd: UnixNsqd) -> None:
    """IDENTIFY, SUB, RDY, PUB, MPUB, FIN all work over AF_UNIX."""
    sub = unix_conn(unix_nsqd.sock_path)
    publisher = unix_conn(unix_nsqd.sock_path)
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


def test_graceful_stop_removes_the_socket_file(unix_nsqd: UnixNsqd) -> None:
    """Like Go's UnixListener.Close: after SIGTERM the socket file is gone."""
    assert os.path.exists(unix_nsqd.sock_path)
    assert unix_nsqd.stop() == 0
    assert not os.path.exists(unix_nsqd.sock_path), "the unix socket file was left behind after a graceful stop"


@pytest.mark.process
def test_existing_file_at_the_path_is_not_clobbered(tmp_path: Path) -> None:
    """Go's net.Listen("unix") never unlinks: an existing file at the path is a fatal bind error (exit 1), and
    the file is left alone."""
    sock_dir = tempfile.mkdtemp(prefix="nsqd", dir="/tmp")
    path = os.path.join(sock_dir, "nsqd.sock")
    try:
        Path(path).write_text("not a socket")
        args = [str(NSQD_BIN), f"--tcp-address={path}", "--http-address=", f"--data-path={tmp_path}"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            output = proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            proc.terminate()
            output = proc.communicate()[0]
            pytest.fail(f"nsqd started listening on {path} although a file existed there:\n{output[-500:]}")
        assert proc.returncode == 1, output
        assert (f"FATAL: failed to instantiate nsqd - listen ({path}) failed - listen unix {path}: bind: "
                "address already in use") in output
        assert Path(path).read_text() == "not a socket"
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
