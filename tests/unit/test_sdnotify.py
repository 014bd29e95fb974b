"""sd_notify datagrams reach a real unix datagram socket, by path and in the abstract namespace."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from nsqd_py.daemon import sdnotify


def receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(2)
    return sock


def test_ready_and_stopping_on_a_path_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "notify.sock")
    with receiver(path) as sock:
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert sdnotify.ready("listening")
        assert sock.recv(4096).decode().split("\n") == ["READY=1", f"MAINPID={os.getpid()}", "STATUS=listening"]
        assert sdnotify.stopping()
        assert sock.recv(4096) == b"STOPPING=1"


def test_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"nsqd-py-test-{uuid.uuid4().hex}"
    with receiver("\0" + name) as sock:
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sdnotify.stopping()
        assert sock.recv(4096) == b"STOPPING=1"


def test_no_socket_is_a_no_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not sdnotify.ready()
    monkeypatch.setenv("NOTIFY_SOCKET", "vsock:2:1234")  # not supported: ignored
    assert not sdnotify.ready()
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    assert not sdnotify.stopping()
