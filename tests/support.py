"""Test support: start the installed nsqd as a real process, and a raw protocol V2 socket client."""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent

from nsqd_py.testing import NsqdServer

REPO = Path(__file__).resolve().parent.parent
NSQD_BIN = Path(sys.executable).parent / "nsqd"
#: what the real Go nsqd 1.3.0 recorded (data dirs, HTTP goldens, logs); NSQ_GO_FIXTURES points elsewhere
GO_FIXTURES = Path(os.environ.get("NSQ_GO_FIXTURES", REPO.parent / "shared" / "fixtures"))

FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2


class NsqdProcess(NsqdServer):
    """nsqd_py.testing's server, run from the installed `nsqd` script, with what the suite adds: raw HTTP
    requests and protocol V2 connections (InProcessNsqd answers the same calls in-process)."""

    def __init__(self, data_path: Path, *extra: str, http: bool = True) -> None:
        super().__init__(*extra, data_dir=data_path, http=http)

    def command(self) -> list[str]:
        return [str(NSQD_BIN)]

    @property
    def data_path(self) -> Path:
        return self.data_dir

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.process

    def start(self, timeout: float | None = None) -> NsqdProcess:
        super().start(timeout)
        return self

    def request(self, method: str, target: str, body: bytes | None = None,
                headers: list[tuple[str, str]] | None = None) -> Reply:
        """One HTTP request to this nsqd (see `request`)."""
        return request(self.http_port, method, target, body, headers)  # type: ignore[arg-type]

    def connect(self, magic: bytes = b"  V2", timeout: float = 5) -> RawConn:
        """A raw protocol V2 connection to this nsqd."""
        return RawConn(self.tcp_port, magic=magic, timeout=timeout)


#: Go's nsqd 1.3.0, for the tests that also read a data dir with it when it is at hand (they pass without it)
GO_NSQD = Path(os.environ.get("NSQ_GO_NSQD", REPO.parent / "shared" / "reference-go" / "nsqd"))


class GoNsqd(NsqdProcess):
    """Go's nsqd with the same command line as ours."""

    def args(self) -> list[str]:
        return [str(GO_NSQD), *super().args()[1:]]


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    closed: bool = False  # the server closed the connection after this reply

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def json(self) -> Any:
        return json.loads(self.body)


def request(port: int, method: str, target: str, body: bytes | None = None,
            headers: list[tuple[str, str]] | None = None, timeout: float = 10) -> Reply:
    """One request on a fresh connection, with exactly the headers given (plus Host when not given)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = headers if headers is not None else []
    conn.putrequest(method, target, skip_host=any(k.lower() == "host" for k, _ in headers),
                    skip_accept_encoding=True)
    for key, value in headers:
        conn.putheader(key, value)
    if body is not None and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in headers):
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    reply = Reply(resp.status, resp.getheaders(), data, closed=resp.will_close)
    conn.close()
    return reply


class RawConn:
    """A protocol V2 client over a socket, for exact byte-level checks: the one raw connection helper (TLS and
    compression: tests/security/util.py's SecureConn; unix socket or a tiny receive window: pass the socket)."""

    def __init__(self, port: int | socket.socket, magic: bytes = b"  V2", timeout: float = 5) -> None:
        """``port`` of nsqd on loopback, or a connected socket (an in-process nsqd's socket pair)."""
        if isinstance(port, int):
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        else:
            self.sock = port
            self.sock.settimeout(timeout)
        if magic:
            self.sock.sendall(magic)
        self.buf = b""

    def send(self, line: str | bytes, body: bytes | None = None) -> None:
        data = (line.encode() if isinstance(line, str) else line) + b"\n"
        if body is not None:
            data += struct.pack(">i", len(body)) + body
        self.send_raw(data)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv(self) -> bytes:
        """The next bytes from the server (b"" at EOF); SecureConn decodes them here."""
        return self.sock.recv(65536)

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self._recv()
            if not chunk:
                raise ConnectionError("closed by server")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self, skip_heartbeats: bool = True) -> tuple[int, bytes]:
        while True:
            size, ftype = struct.unpack(">ii", self._read(8))
            data = self._read(size - 4)
            if skip_heartbeats and ftype == FRAME_RESPONSE and data == b"_heartbeat_":
                self.send("NOP")
                continue
            return ftype, data

    def identify(self, **fields: object) -> dict | bytes:
        self.send("IDENTIFY", json.dumps({"feature_negotiation": True, **fields}).encode())
        _, data = self.frame()
        try:
            return json.loads(data)
        except ValueError:
            return data

    def sub(self, topic: str, channel: str) -> tuple[int, bytes]:
        self.send(f"SUB {topic} {channel}")
        return self.frame()

    def message(self) -> Message:
        ftype, data = self.frame()
        assert ftype == FRAME_MESSAGE, (ftype, data)
        return Message.parse(data)

    def is_closed(self, wait: float = 2.0) -> bool:
        """True when the server closed the connection (reads EOF) within ``wait`` seconds."""
        self.sock.settimeout(wait)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except TimeoutError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        self.sock.close()


class Message:
    def __init__(self, timestamp: int, attempts: int, id: bytes, body: bytes) -> None:
        self.timestamp, self.attempts, self.id, self.body = timestamp, attempts, id, body

    @classmethod
    def parse(cls, data: bytes) -> Message:
        ts, attempts = struct.unpack(">qH", data[:10])
        return cls(ts, attempts, data[10:26], data[26:])


def unique(prefix: str) -> str:
    """A topic or channel name no other test uses, so tests can share one nsqd."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def find_channel(nsqd: NsqdProcess, topic: str, channel: str) -> dict | None:
    """The channel's /stats row, None while nsqd has no such channel."""
    for t in nsqd.stats(topic=topic, channel=channel)["topics"] or []:
        for c in t["channels"] or []:
            if c["channel_name"] == channel:
                return c
    return None


def finished_everything(nsqd: NsqdProcess, topic: str, channel: str) -> bool:
    """The channel got every message the topic took and holds none: nothing waiting, in flight or deferred. Counting
    matters: a channel made by SUB shows depth 0 for a moment before the topic's pump hands it the waiting messages."""
    for t in nsqd.stats(topic=topic, channel=channel)["topics"] or []:
        for c in t["channels"] or []:
            if c["channel_name"] == channel:
                return (c["message_count"] >= t["message_count"] and c["depth"] == 0 and c["in_flight_count"] == 0
                        and c["deferred_count"] == 0)
    return False


def channel_stats(nsqd: NsqdProcess, topic: str, channel: str) -> dict:
    """The channel's /stats row; an AssertionError naming the channel when nsqd has none."""
    found = find_channel(nsqd, topic, channel)
    assert found is not None, f"no channel {topic}/{channel}"
    return found


def wait_until(predicate: Callable[[], Any], timeout: float = 10, interval: float = 0.02, what: str = "") -> Any:
    """Poll ``predicate`` until truthy; return its value or fail at the timeout. It sleeps with gevent, so an
    in-process nsqd keeps running meanwhile (outside gevent it is a plain sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        gevent.sleep(interval)



def drain(port: int, topic: str, channel: str, idle: float = 1.0, limit: float = 60.0, rdy: int = 200,
          **identify: object) -> list[Message]:
    """SUB and FIN everything until nothing arrives for ``idle`` seconds; returns the messages in order.
    Output buffering is off unless asked for, so ``idle`` is not eaten by nsqd's 250 ms buffer timeout."""
    conn = RawConn(port, timeout=limit)
    conn.identify(**{"output_buffer_timeout": -1, **identify})
    assert conn.sub(topic, channel) == (FRAME_RESPONSE, b"OK")
    conn.send(f"RDY {rdy}")
    got: list[Message] = []
    deadline = time.time() + limit
    conn.sock.settimeout(idle)
    try:
        while time.time() < deadline:
            try:
                ftype, data = conn.frame()
            except TimeoutError:
                break
            if ftype == FRAME_MESSAGE:
                msg = Message.parse(data)
                got.append(msg)
                conn.send(b"FIN " + msg.id)
    finally:
        conn.close()
    return got


def go_fixture(name: str) -> Path:
    """One of the Go fixtures; a missing one fails the test (never a silent skip)."""
    path = GO_FIXTURES / name
    assert path.exists(), f"Go fixture {path} not found (set NSQ_GO_FIXTURES to where they are)"
    return path


def copy_fixture(name: str, dest: Path) -> dict:
    """Copy a Go data-dir fixture (all files but MANIFEST.json) into ``dest``; returns the MANIFEST."""
    src = go_fixture(name)
    dest.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.name != "MANIFEST.json":
            (dest / item.name).write_bytes(item.read_bytes())
    return json.loads((src / "MANIFEST.json").read_text())
