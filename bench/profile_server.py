"""Where a server's CPU goes, per operation: ours against Go's nsqd under the same loads (issue 37's measurements).

    .venv/bin/python bench/profile_server.py --go-dir ../shared/reference-go          # needs perf, root

For each workload and server (fresh, alternating ours and Go's per round), during the load:
- ``perf stat``: the server's syscalls and context switches per operation;
- ``perf record``: its CPU samples by shared object, turned into microseconds per operation: the kernel, the
  interpreter (python3.11 / libpython), our mypyc-compiled modules, gevent's loop (libev, greenlet), C
  libraries (libc, orjson, ssl, zlib), and for Go its one binary.
The CPU per operation is /proc's utime+stime over the run, as in compare_go.py; the split shares it out by the
samples' proportions.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import round_trip
from compare_go import OURS, Load, Server

#: perf's shared-object names, grouped into the parts the table shows
PARTS = (
    ("kernel", re.compile(r"\[kernel|\[vdso|\[unknown")),
    ("interpreter", re.compile(r"python3|libpython")),
    ("compiled", re.compile(r"nsqd_py|__mypyc")),
    ("gevent loop", re.compile(r"gevent|greenlet|libev")),
    ("go binary", re.compile(r"^nsqd$")),
    ("C libraries", re.compile(r".")),
)


@dataclass
class Profile:
    ops: int
    seconds: float
    cpu_us: float  # per op
    syscalls: float  # per op
    switches: float  # per op
    parts: dict[str, float] = field(default_factory=dict)  # us per op


def _part(dso: str) -> str:
    return next(name for name, pattern in PARTS if pattern.search(dso))


def _dso_shares(data: Path) -> dict[str, float]:
    report = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso", "--stdio", "-q"],
                            capture_output=True, text=True, timeout=300).stdout
    shares: dict[str, float] = defaultdict(float)
    for line in report.splitlines():
        match = re.match(r"\s*([0-9.]+)%\s+(\S+)", line)
        if match:
            shares[_part(match.group(2))] += float(match.group(1)) / 100
    return shares


def _counts(perf_stat_csv: str) -> dict[str, float]:
    """perf stat -x, lines: value,unit,event,..."""
    found = {}
    for line in perf_stat_csv.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[0].replace(".", "").isdigit():
            found[fields[2]] = float(fields[0])
    return found


def observed(server: Server, run: Callable[[], int]) -> Profile:
    """Run the load (it returns its operation count) under perf stat and perf record attached to the server."""
    work = Path(tempfile.mkdtemp(prefix="nsqd-profile-"))
    pid = str(server.proc.pid)
    stat = subprocess.Popen(["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter,context-switches", "-p", pid],
                            stderr=subprocess.PIPE, text=True)
    record = subprocess.Popen(["perf", "record", "-q", "-F", "999", "-o", str(work / "perf.data"), "-p", pid],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before = server.cpu()
    start = time.perf_counter()
    ops = run()
    seconds = time.perf_counter() - start
    used = server.cpu() - before
    for proc in (stat, record):
        proc.send_signal(signal.SIGINT)
    _, stat_err = stat.communicate(timeout=60)
    record.wait(timeout=120)
    counts = _counts(stat_err)
    shares = _dso_shares(work / "perf.data")
    shutil.rmtree(work, ignore_errors=True)
    cpu_us = used / ops * 1e6
    return Profile(ops, seconds, cpu_us, counts.get("raw_syscalls:sys_enter", 0.0) / ops,
                   counts.get("context-switches", 0.0) / ops, {part: cpu_us * share for part, share in shares.items()})


@dataclass
class Workload:
    flags: tuple[str, ...]
    prepare: Callable[[Server, Load], object]  # before the measured part: a channel, a backlog
    run: Callable[[Server, Load], int]  # the measured load; its operation count


def profile(workload: Workload, binary: Path, load: Load) -> Profile:
    server = Server(binary, *workload.flags)
    try:
        workload.prepare(server, load)
        return observed(server, lambda: workload.run(server, load))
    finally:
        server.stop()


def _backlog(server: Server, load: Load, seconds: float) -> None:
    server.create_channel()
    load.write(server, seconds)


def _http_pub(server: Server, load: Load) -> int:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is missing: make bench-deps")
    script = Path(__file__).parent / "wrk_pub.lua"
    out = subprocess.run([wrk, "-t1", "-c32", f"-d{int(load.runfor)}s", "-s", str(script),
                          f"http://127.0.0.1:{server.http}/pub?topic=http_bench"],
                         capture_output=True, text=True, timeout=load.runfor + 60)
    return int(re.search(r"(\d+) requests in", out.stdout).group(1))  # type: ignore[union-attr]


def _read_seconds(load: Load) -> float:
    return max(2.0, load.runfor / 2)


BACKLOG = ("--mem-queue-size=1000000",)
WORKLOADS: dict[str, Workload] = {
    "PUB, 32 connections": Workload((), lambda s, ld: s.create_channel(),
                                    lambda s, ld: round_trip.pub_loop(s.tcp, 32, ld.runfor).count),
    "MPUB 200 (bench_writer)": Workload(BACKLOG, lambda s, ld: s.create_channel(),
                                        lambda s, ld: int(ld.write(s, ld.runfor) * ld.runfor)),
    "consume backlog (bench_reader)": Workload(
        BACKLOG, lambda s, ld: _backlog(s, ld, ld.runfor),
        lambda s, ld: int(ld.read(s, _read_seconds(ld)) * _read_seconds(ld))),
    "RDY 1, 8 connections": Workload(BACKLOG, lambda s, ld: _backlog(s, ld, max(1.0, ld.runfor / 4)),
                                     lambda s, ld: round_trip.rdy1_consume(s.tcp, 8, ld.runfor).count),
    "HTTP /pub (wrk -c32)": Workload((), lambda s, ld: None, _http_pub),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go-dir", type=Path, help="directory with Go's nsqd, bench_writer, bench_reader")
    parser.add_argument("--nsqd", type=Path, default=OURS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runfor", type=float, default=4.0)
    parser.add_argument("--only", default="", help="run only the workloads whose name contains this text")
    args = parser.parse_args()
    load = Load(args.go_dir, args.runfor)
    servers = {"ours": args.nsqd, **({"go": args.go_dir / "nsqd"} if args.go_dir else {})}
    chosen = {name: work for name, work in WORKLOADS.items() if args.only.lower() in name.lower()}
    results: dict[tuple[str, str], list[Profile]] = defaultdict(list)
    for _ in range(args.rounds):
        for name, work in chosen.items():
            for who, binary in servers.items():
                results[name, who].append(profile(work, binary, load))
    parts = [part for part, _ in PARTS]
    print(f"medians of {args.rounds} rounds; microseconds of server CPU per operation, split by perf samples")
    print("| workload | server | ops/s | CPU us/op | syscalls/op | switches/op | " + " | ".join(parts) + " |")
    print("|---" * (6 + len(parts)) + "|")
    for (name, who), profiles in results.items():
        def med(get: Callable[[Profile], float], runs: list[Profile] = profiles) -> float:
            return statistics.median(get(p) for p in runs)
        cells = [f"{med(lambda p: p.ops / p.seconds):,.0f}", f"{med(lambda p: p.cpu_us):.2f}",
                 f"{med(lambda p: p.syscalls):.2f}", f"{med(lambda p: p.switches):.3f}",
                 *(f"{med(lambda p, part=part: p.parts.get(part, 0.0)):.2f}" for part in parts)]
        print(f"| {name} | {who} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
