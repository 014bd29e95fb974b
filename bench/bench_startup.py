"""Start-up time: from exec of `nsqd` to its HTTP `/ping` answering `OK`, over N fresh processes.

Each user test that takes the `nsqd` fixture waits this long, so it is the figure to keep small.
Run it alone on the machine (other load skews it); it prints min/median/max in milliseconds. nsqd runs
without PYTHONDONTWRITEBYTECODE, so that the warm-up start leaves .pyc files as pip's install of a wheel
does (otherwise every start compiles nsqd_py's sources again: ~40 ms more).

    .venv/bin/python bench/bench_startup.py --runs 20
    .venv/bin/python bench/bench_startup.py --nsqd-cmd /path/to/go/nsqd     # the same against Go's nsqd
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
PING = b"GET /ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pinged(port: int) -> bool:
    """One /ping attempt: False while nothing listens yet (or the reply is not 200 OK)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(PING)
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
    except OSError:
        return False
    return reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0] and reply.endswith(b"OK")


def one_start(cmd: list[str], timeout: float) -> float:
    """Seconds from exec to the first successful /ping; the process is stopped afterwards."""
    http_port, tcp_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as data:
        args = [*cmd, f"--tcp-address=127.0.0.1:{tcp_port}", f"--http-address=127.0.0.1:{http_port}",
                f"--data-path={data}"]
        started = time.perf_counter()
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_ENV)
        try:
            while not pinged(http_port):
                if proc.poll() is not None:
                    raise SystemExit(f"nsqd exited with {proc.returncode}: {' '.join(args)}")
                if time.perf_counter() - started > timeout:
                    raise SystemExit(f"no /ping answer within {timeout} s")
                time.sleep(0.001)
            return time.perf_counter() - started
        finally:
            proc.terminate()
            proc.wait(20)


def main() -> None:
    default = shutil.which("nsqd", path=str(Path(sys.executable).parent)) or "nsqd"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="fresh processes to time (default 20)")
    parser.add_argument("--nsqd-cmd", default=default, help=f"the nsqd to start (default {default})")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for one start")
    args = parser.parse_args()
    one_start([args.nsqd_cmd], args.timeout)  # warm the page cache: the first start reads every file from disk
    times = sorted(one_start([args.nsqd_cmd], args.timeout) * 1000 for _ in range(args.runs))
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"{args.nsqd_cmd}: {args.runs} starts, exec to /ping: min {times[0]:.0f} ms, "
          f"median {statistics.median(times):.0f} ms, max {times[-1]:.0f} ms (load average {load})")


if __name__ == "__main__":
    main()
