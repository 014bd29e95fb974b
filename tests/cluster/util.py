"""Cluster test support: the real nsqlookupd process, a raw `  V1` client, lookupd HTTP helpers."""

from __future__ import annotations

import json
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import requests

from nsqd_py.testing import LookupdServer

NSQLOOKUPD_BIN = Path(sys.executable).parent / "nsqlookupd"


class LookupdProcess(LookupdServer):
    """nsqd_py.testing's nsqlookupd, run from the installed script, broadcasting 127.0.0.1; ``tcp_port`` to
    restart one on the port its nsqd nodes know."""

    def __init__(self, log_dir: Path, *extra: str, tcp_port: int | None = None) -> None:
        super().__init__("--broadcast-address=127.0.0.1", *extra, data_dir=log_dir)
        if tcp_port is not None:
            self.tcp_port = tcp_port

    def command(self) -> list[str]:
        return [str(NSQLOOKUPD_BIN)]

    def start(self, timeout: float | None = None) -> LookupdProcess:
        super().start(timeout)
        return self

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
