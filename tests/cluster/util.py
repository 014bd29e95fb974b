"""Cluster test support: the real nsqlookupd process, a raw `  V1` client, lookupd HTTP helpers."""

from __future__ import annotations

import json
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import requests

from tests.support import ServerProcess, free_port

NSQLOOKUPD_BIN = Path(sys.executable).parent / "nsqlookupd"


class LookupdProcess(ServerProcess):
    """The installed nsqlookupd on free loopback ports, broadcasting 127.0.0.1."""

    def __init__(self, log_dir: Path, *extra: str, tcp_port: int | None = None) -> None:
        self.tcp_port = tcp_port or free_port()
        self.http_port = free_port()
        self.extra = list(extra)
        self.log_path = Path(log_dir) / f"nsqlookupd-{self.tcp_port}.log"

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.http_address}"

    def start(self, timeout: float = 20) -> LookupdProcess:
        args = [str(NSQLOOKUPD_BIN), f"--tcp-address={self.tcp_address}", f"--http-address={self.http_address}",
                "--broadcast-address=127.0.0.1", *self.extra]
        self.proc = self._launch(args)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nsqlookupd exited with {self.proc.returncode}:\n{self.log()}")
            try:
                requests.get(f"{self.http_url}/ping", timeout=1)
                with socket.create_connection(("127.0.0.1", self.tcp_port), timeout=0.2):
                    return self
            except (OSError, requests.RequestException):
                time.sleep(0.05)
        raise RuntimeError(f"nsqlookupd did not start:\n{self.log()}")

    def get(self, path: str, **params: str) -> requests.Response:
        return requests.get(f"{self.http_url}{path}", params=params, timeout=5)

    def post(self, path: str, **params: str) -> requests.Response:
        return requests.post(f"{self.http_url}{path}", params=params, timeout=5)

    def producers(self, topic: str) -> list[dict[str, Any]]:
        """/lookup's producers for ``topic`` ([] when lookupd does not know the topic)."""
        resp = self.get("/lookup", topic=topic)
        return resp.json()["producers"] if resp.status_code == 200 else []

    def producer_ports(self, topic: str) -> set[int]:
        return {p["tcp_port"] for p in self.producers(topic)}

    def channels(self, topic: str) -> list[str]:
        return self.get("/channels", topic=topic).json()["channels"]


class RawLookupConn:
    """A protocol `  V1` client over a plain socket (what nsqd speaks to lookupd)."""

    def __init__(self, port: int, magic: bytes = b"  V1") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(magic)

    def command(self, line: str, body: bytes | None = None) -> bytes:
        data = line.encode() + b"\n"
        if body is not None:
            data += struct.pack(">i", len(body)) + body
        self.sock.sendall(data)
        return self.reply()

    def reply(self) -> bytes:
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def identify(self, **fields: Any) -> bytes:
        info = {"broadcast_address": "127.0.0.1", "hostname": "fake", "http_port": 1, "tcp_port": 2,
                "version": "1.3.0", **fields}
        return self.command("IDENTIFY", json.dumps(info).encode())

    def is_closed(self, wait: float = 2.0) -> bool:
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except OSError:
            return True

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by lookupd")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()
