"""HTTP test helpers: raw requests, the golden files from the real Go nsqd, and shape comparison."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support import NsqdProcess, Reply, go_fixture

#: the `nsqd_factory` fixture
NsqdFactory = Callable[..., NsqdProcess]


def raw_exchange(port: int, data: bytes, timeout: float = 5, half_close: bool = False) -> bytes:
    """Send bytes as they are and return everything the server sends until it closes or goes quiet for
    ``timeout`` seconds; ``half_close``: end the sending side after the bytes (the server reads an end)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)  # the server may answer and close before taking everything
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return out


def parse_raw_reply(data: bytes) -> Reply:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = [tuple(line.split(": ", 1)) for line in lines[1:]]
    return Reply(status, headers, body)  # type: ignore[arg-type]


# ---- golden files --------------------------------------------------------------------------------------------


@dataclass
class Golden:
    file: str
    method: str
    target: str
    request_headers: list[tuple[str, str]]
    request_body: bytes | None
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    extra: dict = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


def load_goldens() -> list[Golden]:
    fixtures = go_fixture("http")
    index = json.loads((fixtures / "requests.json").read_text())
    goldens = []
    for entry in index["requests"]:
        raw = (fixtures / entry["file"]).read_bytes()
        _request_line, _, response = raw.partition(b"\r\n")
        head, _, body = response.partition(b"\r\n\r\n")
        header_lines = head.decode("latin-1").split("\r\n")[1:]
        body = body[: entry["response_body_length"]]
        if "request_body_text" in entry:
            request_body: bytes | None = entry["request_body_text"].encode()
        elif "request_body_base64" in entry:
            request_body = base64.b64decode(entry["request_body_base64"])
        elif "request_body_note" in entry:  # "1048577 bytes of b'z'"
            size, char = re.fullmatch(r"(\d+) bytes of b'(.)'", entry["request_body_note"]).groups()
            request_body = char.encode() * int(size)
        else:
            request_body = None
        goldens.append(Golden(
            entry["file"], entry["method"], entry["target"],
            [(k, v) for k, v in entry["request_headers"] if k.lower() != "host"],
            request_body, entry["response_status"],
            [tuple(line.split(": ", 1)) for line in header_lines],  # type: ignore[misc]
            body, entry,
        ))
    return goldens


# ---- comparing shapes ----------------------------------------------------------------------------------------


def shape_diff(golden: Any, ours: Any, path: str = "$", drop_keys: frozenset[str] = frozenset()) -> list[str]:
    """Differences in structure: key lists (and order), value types, null versus [], list lengths."""
    if isinstance(golden, dict):
        if not isinstance(ours, dict):
            return [f"{path}: object expected, got {type(ours).__name__}"]
        want = [k for k in golden if k not in drop_keys]
        if list(ours) != want:
            return [f"{path}: keys {list(ours)} != {want}"]
        diffs = []
        for key in want:
            diffs += shape_diff(golden[key], ours[key], f"{path}.{key}", drop_keys)
        return diffs
    if isinstance(golden, list):
        if not isinstance(ours, list):
            return [f"{path}: array expected, got {ours!r}"]
        if len(golden) != len(ours):
            return [f"{path}: {len(ours)} items, golden has {len(golden)}"]
        diffs = []
        for i, (g, o) in enumerate(zip(golden, ours, strict=True)):
            diffs += shape_diff(g, o, f"{path}[{i}]", drop_keys)
        return diffs
    if type(golden) is not type(ours):
        return [f"{path}: {type(ours).__name__} ({ours!r}), golden {type(golden).__name__} ({golden!r})"]
    return []


_DURATION = r"\d+(\.\d+)?(ns|us|µs|ms|s|m|h)"


def normalize_stats_text(text: str) -> list[str]:
    """The text /stats with run-dependent values masked, keeping every column position that matters."""
    out = []
    for line in text.split("\n"):
        line = re.sub(r"^nsqd v\S+ \(built w/\S+\)$", "nsqd VERSION", line)
        line = re.sub(r"^start_time \S+$", "start_time T", line)
        line = re.sub(r"^uptime \S+$", "uptime D", line)
        line = re.sub(r"^(   \w+ *\t)\d+$", r"\1N", line)
        line = re.sub(r"e2e%: .*$", lambda m: re.sub(_DURATION, "D", m.group(0)), line)
        line = re.sub(r"connected: \S+$", "connected: D", line)
        line = re.sub(r"(\S):\d+ ", r"\1:PORT ", line)
        out.append(line)
    return out
