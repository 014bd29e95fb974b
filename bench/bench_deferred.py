"""Many deferred messages: memory, and the start-up time with them (issue 45 item 4, --persist-deferred).

Starts nsqd on a fresh data dir, DPUBs N messages (pipelined over one connection) with a delay far beyond the run,
reads the server's RSS, stops it with SIGTERM, then times a restart from exec to /ping answering and to /stats showing
all N deferred again, and the RSS after that. ``--nsqd-cmd`` runs another nsqd the same way (Go's: it forgets the
deferrals at the restart, so only its first RSS compares).

    .venv/bin/python bench/bench_deferred.py --count 1000000 --persist
    .venv/bin/python bench/bench_deferred.py --count 1000000                  # deferred in memory only, as nsqd
    .venv/bin/python bench/bench_deferred.py --count 1000000 --nsqd-cmd ../shared/reference-go/nsqd
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOPIC = "deferred_bench"
BATCH = 10000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(port: int, target: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(f"GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data.split(b"\r\n\r\n", 1)[1]


def _wait_ping(port: int, proc: subprocess.Popen[bytes]) -> None:
    while proc.poll() is None:
        try:
            if _get(port, "/ping") == b"OK":
                return
        except OSError:
            time.sleep(0.005)
    raise SystemExit(f"nsqd exited with {proc.returncode}")


def _channel(port: int) -> dict:
    stats = json.loads(_get(port, f"/stats?format=json&topic={TOPIC}"))
    return next(c for t in stats["topics"] for c in t["channels"])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _publish(tcp: int, count: int, body: bytes) -> None:
    command = b"DPUB %s %d\n" % (TOPIC.encode(), 3_000_000) + struct.pack(">i", len(body)) + body
    with socket.create_connection(("127.0.0.1", tcp)) as sock:
        sock.sendall(b"  V2")
        left = count
        while left:
            n = min(BATCH, left)
            sock.sendall(command * n)
            want = n * 10  # each answer is [size 6][type 0]OK
            got = 0
            while got < want:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    raise SystemExit("nsqd closed the connection")
                got += len(chunk)
            left -= n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--persist", action="store_true", help="start nsqd with --persist-deferred")
    parser.add_argument("--nsqd-cmd", default=str(Path(sys.executable).parent / "nsqd"))
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="bench-deferred-")
    tcp, http = _free_port(), _free_port()
    command = [args.nsqd_cmd, f"--data-path={data}", f"--tcp-address=127.0.0.1:{tcp}",
               f"--http-address=127.0.0.1:{http}", "--max-req-timeout=1h", "--log-level=warn"]
    if args.persist:
        command.append("--persist-deferred")
    try:
        proc = subprocess.Popen(command)
        _wait_ping(http, proc)
        with socket.create_connection(("127.0.0.1", tcp)) as sock:
            sock.sendall(b"  V2" + f"SUB {TOPIC} c\n".encode())  # the topic and its channel; no RDY
            sock.recv(64)
        started = time.monotonic()
        _publish(tcp, args.count, b"x" * args.body_size)
        publish_s = time.monotonic() - started
        while _channel(http)["message_count"] < args.count:
            time.sleep(0.1)
        deferred = _channel(http)["deferred_count"]
        rss_before = _rss_mib(proc.pid)
        proc.send_signal(signal.SIGTERM)
        stop_started = time.monotonic()
        proc.wait(timeout=600)
        stop_s = time.monotonic() - stop_started
        store_mib = sum(p.stat().st_size for p in Path(data).iterdir() if ".deferred." in p.name) / 2**20
        restarted = time.monotonic()
        proc = subprocess.Popen(command)
        _wait_ping(http, proc)
        ping_s = time.monotonic() - restarted
        back = _channel(http)["deferred_count"]
        rss_after = _rss_mib(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=600)
        print(json.dumps({
            "count": args.count, "body_size": args.body_size, "persist": args.persist, "nsqd": args.nsqd_cmd,
            "publish_s": round(publish_s, 2), "deferred": deferred, "rss_mib": round(rss_before, 1),
            "stop_s": round(stop_s, 2),
            "store_mib": round(store_mib, 1), "restart_to_ping_s": round(ping_s, 2),
            "deferred_after_restart": back, "rss_after_restart_mib": round(rss_after, 1),
            "load": os.getloadavg()[0],
        }))
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
