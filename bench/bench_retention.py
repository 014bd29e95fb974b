"""Retention's cost on the publish path, and the replay's consume rate (issue 46 items 1 and 2).

Publish: a fresh nsqd with one channel, N PUBs pipelined over one connection (a window of 200 in flight) and then N
messages as MPUBs of 100, without and with ``--topic-retention=1h``, alternating (``--rounds`` of each): the rate
and the server's CPU per message (utime + stime of /proc/PID/stat). Replay: ``--replay`` messages MPUBed to a topic
with retention and a channel, then that channel's backlog consumed (RDY 2500, FIN each) and a channel created with
``start=earliest`` consumed the same way: the two rates side by side.

    .venv/bin/python bench/bench_retention.py --count 200000 --replay 1000000
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BODY = b"x" * 100
TICKS = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _http(port: int, method: str, target: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(f"{method} {target} HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data.split(b"\r\n\r\n", 1)[1]


class Nsqd:
    def __init__(self, cmd: str, *flags: str) -> None:
        self.data = tempfile.mkdtemp(prefix="bench_retention.")
        self.tcp, self.http = _free_port(), _free_port()
        self.proc = subprocess.Popen([cmd, f"--data-path={self.data}", f"--tcp-address=127.0.0.1:{self.tcp}",
                                      f"--http-address=127.0.0.1:{self.http}", "--log-level=warn", *flags])
        while True:
            try:
                if _http(self.http, "GET", "/ping") == b"OK":
                    return
            except OSError:
                time.sleep(0.02)

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()
        subprocess.run(["rm", "-rf", self.data], check=False)


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"  V2")
        self.buf = bytearray()

    def frame(self) -> tuple[int, bytes]:
        while len(self.buf) < 8 or len(self.buf) < 4 + struct.unpack_from(">i", self.buf)[0]:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise SystemExit("nsqd closed the connection")
            self.buf += chunk
        size, ftype = struct.unpack_from(">ii", self.buf)
        data = bytes(self.buf[8:4 + size])
        del self.buf[:4 + size]
        return ftype, data


def _mpub_payload(count: int) -> bytes:
    return struct.pack(">i", count) + (struct.pack(">i", len(BODY)) + BODY) * count


def publish(port: int, topic: str, count: int, batch: int) -> None:
    conn = Conn(port)
    if batch == 1:
        command = f"PUB {topic}\n".encode() + struct.pack(">i", len(BODY)) + BODY
        sent = answered = 0
        while answered < count:
            window = min(200, count - sent)
            conn.sock.sendall(command * window)
            sent += window
            for _ in range(window):
                assert conn.frame() == (0, b"OK")
            answered += window
    else:
        payload = _mpub_payload(batch)
        command = f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload
        for _ in range(count // batch):
            conn.sock.sendall(command)
            assert conn.frame() == (0, b"OK")
    conn.sock.close()


def consume(port: int, topic: str, channel: str, count: int) -> float:
    """Seconds to receive and FIN ``count`` messages."""
    conn = Conn(port)
    conn.sock.sendall(f"SUB {topic} {channel}\nRDY 2500\n".encode())
    assert conn.frame() == (0, b"OK")
    got = 0
    started = time.perf_counter()
    fins: list[bytes] = []
    while got < count:
        ftype, data = conn.frame()
        if ftype == 0:  # a heartbeat
            conn.sock.sendall(b"NOP\n")
            continue
        fins.append(b"FIN " + data[10:26] + b"\n")
        got += 1
        if len(fins) >= 200 or not conn.buf:
            conn.sock.sendall(b"".join(fins))
            fins = []
    elapsed = time.perf_counter() - started
    conn.sock.close()
    return elapsed


def publish_round(cmd: str, retained: bool, count: int) -> list[tuple[str, float, float]]:
    nsqd = Nsqd(cmd, *(["--topic-retention=1h"] if retained else []))
    rows = []
    try:
        _http(nsqd.http, "POST", "/topic/create?topic=t")
        _http(nsqd.http, "POST", "/channel/create?topic=t&channel=c")
        for kind, batch in (("PUB", 1), ("MPUB x100", 100)):
            cpu, started = nsqd.cpu(), time.perf_counter()
            publish(nsqd.tcp, "t", count, batch)
            elapsed, used = time.perf_counter() - started, nsqd.cpu() - cpu
            rows.append((kind, count / elapsed, used / count * 1e6))
            _http(nsqd.http, "POST", "/channel/empty?topic=t&channel=c")
    finally:
        nsqd.stop()
    return rows


def replay_rates(cmd: str, count: int) -> tuple[float, float]:
    nsqd = Nsqd(cmd, "--topic-retention=1h")
    try:
        _http(nsqd.http, "POST", "/topic/create?topic=r")
        _http(nsqd.http, "POST", "/channel/create?topic=r&channel=backlog")
        publish(nsqd.tcp, "r", count, 1000)
        backlog = consume(nsqd.tcp, "r", "backlog", count)
        print(_http(nsqd.http, "POST", "/channel/create?topic=r&channel=replay&start=earliest").decode())
        replay = consume(nsqd.tcp, "r", "replay", count)
    finally:
        nsqd.stop()
    return count / backlog, count / replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nsqd-cmd", default=str(Path(sys.executable).parent / "nsqd"))
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--replay", type=int, default=1000000)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    for round_no in range(args.rounds):
        for retained in (False, True):
            for kind, rate, cpu_us in publish_round(args.nsqd_cmd, retained, args.count):
                label = "retention" if retained else "plain"
                print(f"round {round_no + 1} {label:9} {kind:9} {rate:10.0f} msg/s {cpu_us:6.2f} us CPU/msg")
    if args.replay:
        for round_no in range(args.rounds):
            backlog, replay = replay_rates(args.nsqd_cmd, args.replay)
            print(f"round {round_no + 1} consume {args.replay} backlog {backlog:8.0f} msg/s, "
                  f"replay {replay:8.0f} msg/s")


if __name__ == "__main__":
    main()
