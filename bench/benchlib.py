"""Helpers the load generators share (standard library only, like the tools themselves)."""

from __future__ import annotations

import argparse
import calendar
import json
import queue
import re
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

HEARTBEAT = b"_heartbeat_"
II = struct.Struct(">ii")  # frame size and type
_NAME_RE = re.compile(r"^[.a-zA-Z0-9_-]{1,64}$|^[.a-zA-Z0-9_-]{1,54}#ephemeral$")
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Parse a Go-style duration (``10s``, ``1m30s``, ``500ms``; a bare number means seconds) into seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _DURATION_RE.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (examples: 10s, 1m, 1m30s, 500ms)")
    return total


def parse_deadline(text: str) -> float:
    """Parse ``--deadline``: Go's ``2006-01-02 15:04:05`` layout (UTC, as nsq's bench.py passes it) or unix seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))
    except ValueError as exc:
        msg = f"invalid deadline {text!r}: want 'YYYY-MM-DD HH:MM:SS' (UTC) or unix seconds"
        raise argparse.ArgumentTypeError(msg) from exc


def parse_name(text: str) -> str:
    """Validate a topic/channel name like nsqd does (otherwise ``a b`` would silently mean ``a``)."""
    if not _NAME_RE.match(text):
        raise argparse.ArgumentTypeError(f"invalid topic/channel name {text!r}")
    return text


def parse_addr(text: str) -> tuple[str, int]:
    """Split ``host:port``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"invalid address {text!r}, want host:port")
    return host.strip("[]") or "127.0.0.1", int(port)


def make_log(name: str) -> Callable[[str], None]:
    """A function printing lines the way Go's ``log`` with prefix ``[name] `` does (to stderr)."""

    def log(msg: str) -> None:
        sys.stderr.write(f"[{name}] {time.strftime('%Y/%m/%d %H:%M:%S')} {msg}\n")
        sys.stderr.flush()

    return log


def percentiles(values: list[float], qs: tuple[float, ...] = (0.5, 0.9, 0.99)) -> dict[str, float]:
    """Nearest-rank percentiles plus max of ``values`` (returns zeros when empty)."""
    out = {f"p{round(q * 100):d}": 0.0 for q in qs}
    out["max"] = 0.0
    if not values:
        return out
    s = sorted(values)
    for q in qs:
        out[f"p{round(q * 100):d}"] = s[min(len(s) - 1, max(0, int(q * len(s) + 0.999999) - 1))]
    out["max"] = s[-1]
    return out


def read_frame(sock: socket.socket, buf: bytearray) -> tuple[int, bytes]:
    """Blocking read of one frame (used only during the handshake); leftovers stay in ``buf``."""
    while True:
        if len(buf) >= 8:
            size, ftype = II.unpack_from(buf, 0)
            if len(buf) >= 4 + size:
                data = bytes(buf[8 : 4 + size])
                del buf[: 4 + size]
                return ftype, data
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by server during handshake")
        buf += chunk




def wait_until_ready(procs: list[Any], ready_q: Any, abort: Any, go: Any, timeout: float, log: Callable[[str], None],
                     tool: str, as_json: bool) -> tuple[bool, Any]:
    """Start the workers and wait for each to report ready as (index, error or None, detail); on any failure,
    abort and reap them all and say so (as JSON with ``as_json``). Returns (all ready?, the last detail)."""
    for pr in procs:
        pr.start()
    failures, detail = [], None
    for _ in procs:
        try:
            idx, err, detail = ready_q.get(timeout=timeout)
        except queue.Empty:
            failures.append("worker did not become ready in time")
            break
        if err:
            failures.append(f"worker {idx}: {err}")
    if not failures:
        return True, detail
    abort.value = 1
    go.set()
    for f in failures:
        log(f"error: {f}")
    for pr in procs:
        pr.join(5)
        if pr.is_alive():
            pr.terminate()
    if as_json:
        print(json.dumps({"tool": tool, "fatal": failures}))
    return False, None


def start_and_collect(procs: list[Any], go: Any, result_q: Any, deadline: float | None, wait: float,
                      log: Callable[[str], None], clock: Callable[[], float]) -> tuple[list[Any], float, float]:
    """Start the ready workers together (at ``deadline`` if given), collect one result from each (a worker
    that does not report within ``wait`` seconds is given up on), reap them; returns results, start, end."""
    if deadline is not None:
        delay = deadline - time.time()
        log(f"sleeping until {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(deadline))} UTC ({delay:.3f}s)")
        if delay > 0:
            time.sleep(delay)
    start = clock()
    go.set()
    results = []
    for _ in procs:
        try:
            results.append(result_q.get(timeout=wait))
        except queue.Empty:
            log("error: a worker did not report in time")
            break
    end = clock()
    for pr in procs:
        pr.join(5)
        if pr.is_alive():
            pr.terminate()
    return results, start, end
