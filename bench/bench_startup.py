"""Start-up time: from exec of `nsqd` to its HTTP `/ping` answering `OK`, over N fresh processes.

Each user test that takes the `nsqd` fixture waits this long, so it is the figure to keep small.
Run it alone on the machine (other load skews it); it prints min/median/max in milliseconds. nsqd runs
without PYTHONDONTWRITEBYTECODE, so that the warm-up start leaves .pyc files as pip's install of a wheel
does (otherwise every start compiles nsqd_py's sources again: ~40 ms more).

    .venv/bin/python bench/bench_startup.py --runs 20
    .venv/bin/python bench/bench_startup.py --nsqd-cmd /path/to/go/nsqd     # the same against Go's nsqd
    .venv/bin/python bench/bench_startup.py -m nsqd_py.apps.nsqd            # as the test fixture starts it

`--patch` times what gevent's monkey-patching costs: nsqd starts from `python -c` with daemon/gevent_patch.py's
patch_all given another module list; two or more `--patch` alternate round by round (A, B, A, B, ...), so that load
from elsewhere falls on all alike. `nsqd` is the list the executables use, `all` gevent's own full list, `none` no
module (gevent and its patching machinery imported, nothing patched: the floor), or name the modules
(`socket,dns,ssl,time`). CPU time (user + sys, from the process's rusage) is printed beside wall time: it
moves less with other load, though it includes the stop after the first /ping.

    .venv/bin/python bench/bench_startup.py --runs 10 --patch nsqd --patch all
"""

from __future__ import annotations

import argparse
import itertools
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

#: nsqd with gevent_patch.patch_all given another module list (sys.argv[1]) than the executables give it
PATCHED_NSQD = """
import sys
from nsqd_py.daemon import gevent_patch
patch_all, name = gevent_patch.patch_all, sys.argv.pop(1)
modules = {"nsqd": gevent_patch.NSQD_MODULES, "all": gevent_patch.EVERYTHING, "none": ()}.get(name, name.split(","))
gevent_patch.patch_all = lambda: patch_all(modules)
from nsqd_py.apps.nsqd import main
main()
"""


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


def one_start(cmd: list[str], timeout: float) -> tuple[float, float]:
    """Seconds from exec to the first successful /ping, and the CPU seconds nsqd used (until stopped afterwards)."""
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
            took = time.perf_counter() - started
        except BaseException:
            proc.kill()
            proc.wait(20)
            raise
        proc.terminate()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        return took, usage.ru_utime + usage.ru_stime


def summary(label: str, times: list[tuple[float, float]]) -> str:
    """min/median/max of wall and CPU milliseconds, with the middle half's spread."""
    def spread(values: list[float]) -> str:
        ms = sorted(value * 1000 for value in values)
        quartiles = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
        return (f"min {ms[0]:.0f}, median {statistics.median(ms):.0f}, max {ms[-1]:.0f} ms "
                f"(middle half {quartiles[0]:.0f}-{quartiles[2]:.0f})")
    return (f"{label}: {len(times)} starts, exec to /ping: {spread([wall for wall, _ in times])}; "
            f"CPU: {spread([cpu for _, cpu in times])}")


def main() -> None:
    default = shutil.which("nsqd", path=str(Path(sys.executable).parent)) or "nsqd"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="fresh processes to time (default 20)")
    parser.add_argument("--nsqd-cmd", default=default, help=f"the nsqd to start (default {default})")
    parser.add_argument("-m", "--module", help="start `python -m MODULE` (this Python) instead, as nsqd_py/testing.py "
                        "does (nsqd_py.apps.nsqd)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for one start")
    parser.add_argument("--patch", action="append", metavar="MODULES",
                        help="nsqd (our list), all (gevent's), none or a comma list: start nsqd_py's nsqd with only "
                             "these modules monkey-patched; repeat to alternate variants round by round")
    args = parser.parse_args()
    variants = {name: [sys.executable, "-c", PATCHED_NSQD, name] for name in args.patch or ()}
    if not variants and args.module:
        variants = {f"-m {args.module}": [sys.executable, "-m", args.module]}
    elif not variants:
        variants = {args.nsqd_cmd: [args.nsqd_cmd]}
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    for cmd in variants.values():
        one_start(cmd, args.timeout)  # warm the page cache: the first start reads every file from disk
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _, (name, cmd) in itertools.product(range(args.runs), variants.items()):
        times[name].append(one_start(cmd, args.timeout))
    print(f"load average before {load}, after " + " ".join(f"{value:.2f}" for value in os.getloadavg()))
    first = next(iter(times.values()))
    for name, measured in times.items():
        line = summary(name if args.patch is None else f"--patch {name}", measured)
        if measured is not first:  # round by round against the first variant: load that comes and goes cancels
            wall, cpu = ([(mine[i] - theirs[i]) * 1000 for mine, theirs in zip(measured, first, strict=True)]
                         for i in (0, 1))
            line += f"; minus the first, paired by round: wall {statistics.median(wall):+.1f}, " \
                    f"CPU {statistics.median(cpu):+.1f} ms (medians)"
        print(line)


if __name__ == "__main__":
    main()
