"""Throughput of nsq_to_nsq (nsqd -> nsqd) and nsq_to_http (nsqd -> a local HTTP sink), as real processes.

    .venv/bin/python bench/bench_relay.py --messages 20000 --size 200

Publishes a backlog into a fresh source nsqd, starts the tool, and times until the destination holds every
message (nsq_to_nsq) or the sink accepted every one (nsq_to_http). Prints msgs/s and the tool's CPU per
message (from /proc). Both nsqd run from this checkout (`nsqd_py.testing`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from nsqd_py.testing import NsqdServer

BIN = Path(sys.executable).parent
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def backlog(nsqd: NsqdServer, topic: str, count: int, size: int) -> None:
    body = b"x" * size
    for start in range(0, count, 1000):
        nsqd.publish(topic, *([body] * min(1000, count - start)))


def depth(nsqd: NsqdServer, topic: str) -> int:
    topics = nsqd.stats(topic)["topics"]
    return topics[0]["depth"] if topics else 0


def timed(tool: subprocess.Popen, done, limit: float = 300.0) -> tuple[float, float]:
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > limit or tool.poll() is not None:
            raise SystemExit("the tool stopped or took too long")
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    return elapsed, cpu_seconds(tool.pid)


def bench_nsq_to_nsq(count: int, size: int) -> None:
    with NsqdServer() as source, NsqdServer() as destination:
        backlog(source, "relay", count, size)
        tool = subprocess.Popen([str(BIN / "nsq_to_nsq"), f"--nsqd-tcp-address={source.tcp_address}",
                                 "--topic=relay", f"--destination-nsqd-tcp-address={destination.tcp_address}",
                                 "--status-every=0"], stderr=subprocess.DEVNULL)
        try:
            elapsed, cpu = timed(tool, lambda: depth(destination, "relay") >= count)
        finally:
            tool.terminate()
            tool.wait()
    report("nsq_to_nsq", count, size, elapsed, cpu)


def bench_nsq_to_http(count: int, size: int, publishers: int) -> None:
    accepted = [0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                accepted[0] += 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    sink = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    try:
        with NsqdServer() as source:
            backlog(source, "relay", count, size)
            tool = subprocess.Popen([str(BIN / "nsq_to_http"), f"--nsqd-tcp-address={source.tcp_address}",
                                     "--topic=relay", f"--post=http://127.0.0.1:{sink.server_address[1]}/",
                                     f"-n={publishers}", "--status-every=0"], stderr=subprocess.DEVNULL)
            try:
                elapsed, cpu = timed(tool, lambda: accepted[0] >= count)
            finally:
                tool.terminate()
                tool.wait()
    finally:
        sink.shutdown()
    report(f"nsq_to_http (-n {publishers})", count, size, elapsed, cpu)


def report(name: str, count: int, size: int, elapsed: float, cpu: float) -> None:
    print(f"{name:24s} {count / elapsed:10.0f} msgs/s {count * size / elapsed / 1e6:7.2f} MB/s   "
          f"tool CPU {cpu / count * 1e6:7.1f} us/msg   ({count} x {size} B in {elapsed:.2f} s, "
          f"load {os.getloadavg()[0]:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--publishers", type=int, default=16, help="nsq_to_http -n")
    args = parser.parse_args()
    bench_nsq_to_nsq(args.messages, args.size)
    bench_nsq_to_http(args.messages, args.size, args.publishers)


if __name__ == "__main__":
    main()
