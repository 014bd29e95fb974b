#!/usr/bin/env python3
"""HTTP publish benchmark: `POST /pub` over keep-alive connections, reporting requests/s and latency.

`--connections` (default 32) keep-alive connections, spread over `--procs` worker processes, each process
driving its connections with one selector loop (a pre-built request, a minimal response parser), so the
client costs little CPU. Every connection sends a request, waits for its answer, and sends the next one for
`--runfor` seconds. Any answer but `200 OK` counts as an error.

Without `--http-address` it starts `<repo>/.venv/bin/nsqd` on free loopback ports with a temporary data dir
and `--mem-queue-size=10000000` (so messages stay in memory and the HTTP path is what gets measured), and
reports that server's CPU use. Standard library only.

    .venv/bin/python bench/bench_http.py --runfor 10 --connections 32 --size 200
    .venv/bin/python bench/bench_http.py --http-address 127.0.0.1:4151 --nsqd-pid 1234
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_request(host: str, topic: str, size: int) -> bytes:
    head = f"POST /pub?topic={topic} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {size}\r\n\r\n"
    return head.encode() + b"x" * size


def _response_end(buf: bytearray) -> int:
    """Length of the first complete response in ``buf`` (0 if incomplete); ValueError for a non-200 answer."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return 0
    status_line, *headers = bytes(buf[:head_end]).split(b"\r\n")
    if not status_line.startswith(b"HTTP/1.1 200 "):
        raise ValueError(status_line.decode("latin-1"))
    length = 0
    for header in headers:
        name, _, value = header.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    end = head_end + 4 + length
    return end if len(buf) >= end else 0


def worker(address: tuple[str, int], conns: int, payload: bytes, start_at: float, runfor: float,
           out: mp.Queue) -> None:
    """Drive ``conns`` connections until ``start_at + runfor``; send back (latencies in µs, errors)."""
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(conns):
        sock = socket.create_connection(address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        socks.append(sock)
    time.sleep(max(0.0, start_at - time.time()))
    deadline = time.perf_counter() + runfor
    latencies: list[int] = []
    errors = 0
    state = {}
    for sock in socks:
        sock.sendall(payload)
        state[sock] = [bytearray(), time.perf_counter()]
        sel.register(sock, selectors.EVENT_READ)
    while state:
        for key, _ in sel.select(timeout=1.0):
            sock = key.fileobj
            buf, sent = state[sock]
            try:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed by server")
                buf += chunk
                end = _response_end(buf)
            except (OSError, ValueError) as err:
                errors += 1
                print(f"[bench_http] connection error: {err}", file=sys.stderr)
                sel.unregister(sock)
                del state[sock]
                continue
            if not end:
                continue
            now = time.perf_counter()
            latencies.append(int((now - sent) * 1e6))
            del buf[:end]
            if now >= deadline:
                sel.unregister(sock)
                del state[sock]
            else:
                state[sock][1] = now
                sock.sendall(payload)
    for sock in socks:
        sock.close()
    out.put((latencies, errors))


def percentile(ordered: list[int], p: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] / 1000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nsqd(data_dir: str) -> tuple[subprocess.Popen, str]:
    http = f"127.0.0.1:{free_port()}"
    args = [str(REPO / ".venv/bin/nsqd"), f"--tcp-address=127.0.0.1:{free_port()}", f"--http-address={http}",
            f"--data-path={data_dir}", "--mem-queue-size=10000000", "--log-level=warn"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://{http}/ping", timeout=1).read()
            return proc, http
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("nsqd did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--http-address", help="host:port of a running nsqd (default: start one)")
    parser.add_argument("--nsqd-pid", type=int, help="pid of that nsqd, to report its CPU use")
    parser.add_argument("--topic", default="bench_http")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--procs", type=int, default=2, help="client worker processes")
    parser.add_argument("--size", type=int, default=200, help="message body bytes")
    parser.add_argument("--runfor", type=float, default=10.0, help="seconds")
    args = parser.parse_args()

    data_dir = proc = None
    address, pid = args.http_address, args.nsqd_pid
    if address is None:
        data_dir = tempfile.mkdtemp(prefix="bench_http_")
        proc, address = start_nsqd(data_dir)
        pid = proc.pid
    host, port = address.rsplit(":", 1)
    try:
        urllib.request.urlopen(urllib.request.Request(f"http://{address}/topic/create?topic={args.topic}",
                                                      method="POST"), timeout=5).read()
        payload = build_request(address, args.topic, args.size)
        out: mp.Queue = mp.Queue()
        start_at = time.time() + 0.5
        shares = [args.connections // args.procs + (i < args.connections % args.procs) for i in range(args.procs)]
        workers = [mp.Process(target=worker, args=((host, int(port)), n, payload, start_at, args.runfor, out))
                   for n in shares if n]
        for w in workers:
            w.start()
        cpu_before = cpu_seconds(pid) if pid else None
        time.sleep(max(0.0, start_at - time.time()))
        t0 = time.perf_counter()
        results = [out.get() for _ in workers]
        elapsed = time.perf_counter() - t0
        cpu = (cpu_seconds(pid) - cpu_before) / elapsed if pid and cpu_before is not None else None
        for w in workers:
            w.join()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)

    latencies = sorted(lat for lats, _ in results for lat in lats)
    errors = sum(err for _, err in results)
    print(f"[bench_http] POST /pub, {args.size}-byte bodies, {args.connections} keep-alive connections "
          f"({len(workers)} client procs), {elapsed:.2f}s")
    print(f"[bench_http] {len(latencies)} requests - {len(latencies) / elapsed:.0f} req/s - errors={errors}")
    print(f"[bench_http] latency: p50={percentile(latencies, 50):.2f}ms p90={percentile(latencies, 90):.2f}ms "
          f"p99={percentile(latencies, 99):.2f}ms max={(latencies[-1] / 1000 if latencies else 0):.2f}ms")
    if cpu is not None:
        print(f"[bench_http] server cpu: {cpu * 100:.0f}% of one core")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
