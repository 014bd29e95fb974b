"""The speed table: our nsqd against Go's nsqd, in alternating rounds, as ratios.

    .venv/bin/python bench/compare_go.py                                   # ours only
    .venv/bin/python bench/compare_go.py --go-dir ../shared/reference-go  # + Go's nsqd, bench_writer/reader
    .venv/bin/python bench/compare_go.py --io-workers 1 ...               # + ours with an I/O worker process
    .venv/bin/python bench/compare_go.py --also before=/tmp/old/.venv/bin/nsqd ...   # + another build, alternating

Each round starts a fresh server (fresh data dir) per workload; rounds alternate ours, Go, ours, Go. With
--go-dir, NSQ's own bench_writer/bench_reader generate the load for both servers (else bench/'s Python ones).
Per workload: throughput, and the server's CPU per message (utime+stime from /proc over the run), which the
2-core shared machine disturbs far less than wall-clock rates. HTTP /pub uses wrk (`make bench-deps`) when
installed. The machine's load average is printed with the table.

The fan-out rows feed one topic's 1 or 8 channels live: one bench_reader per channel, subscribed half a second
before bench_writer starts, each reading for --runfor from its own start; their rates summed are the messages
delivered per second.

The "go-nsq" rows run go-nsq v1.1.0 itself (goclient, from --go-dir): Publish() loops from 32 producers, and 8
consumers at max-in-flight 1 draining a backlog.

The "rate held" row offers single PUBs from 32 connections (each waiting for its OK) to 8 consumers at RDY 1 and
steps the offered rate up (5k, 7.5k, 10k, 12.5k, 15k, 17.5k, 20k, 25k, 30k, 40k/s) until the publish-to-deliver p99
passes 1 ms or the producers keep less than 95 % of the offer; the row is the last rate held. Its load, and the
"pub->deliver" rows', comes from bench/paced_load.c (bench/paced.py builds it with cc), for both servers.

The "durable" rows run both servers with ``--mem-queue-size=0 --sync-every=1`` (every OK after its fsync, issue 22):
MPUB with bench_writer, single-message PUB from 32 connections (each waits for its OK; driven from this process),
HTTP /pub with wrk -c32, and consume; the plain rows of the same workloads give our non-durable rate for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import paced
import round_trip

HERE = Path(__file__).resolve().parent
OURS = Path(sys.executable).parent / "nsqd"
_TICKS = os.sysconf("SC_CLK_TCK")
_OPS = re.compile(r"([0-9.]+)ops/s")
_BODY = b"x" * 200
#: Go's (and our) durable settings: nothing is acknowledged before it is fsynced
DURABLE = ("--mem-queue-size=0", "--sync-every=1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def own_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def cpu_seconds(pid: int) -> float:
    """The process's CPU time and that of its live descendants (nsqd's I/O workers)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        children = []
    return own_cpu_seconds(pid) + sum(cpu_seconds(int(child)) for child in children)


def pinned_to(cpus: set[int] | None) -> Callable[[], None] | None:
    """A preexec_fn that pins a child to ``cpus`` (None: no pinning)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def rss_mib(pid: int) -> float:
    """The process's resident set and its descendants' (nsqd's I/O workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024 + sum(rss_mib(int(child)) for child in children)
    return 0.0


class Server:
    """One nsqd (ours or Go's) on free ports with a fresh data dir."""

    def __init__(self, binary: Path, *flags: str, data: str | None = None, cpus: set[int] | None = None) -> None:
        """``cpus``: the cores the server (every thread it starts) may run on."""
        self.tcp, self.http = free_port(), free_port()
        self.data = data or tempfile.mkdtemp(prefix="nsqd-bench-")
        self._own_marks: list[float] = []
        self._cpu_marks: list[float] = []
        self.proc = subprocess.Popen([str(binary), f"--tcp-address=127.0.0.1:{self.tcp}",
                                      f"--http-address=127.0.0.1:{self.http}", f"--data-path={self.data}", *flags],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=pinned_to(cpus))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.http}/ping", timeout=1).read()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{binary} did not start")

    def post(self, path: str, body: bytes = b"") -> None:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{self.http}{path}", data=body,
                                                      method="POST"), timeout=10).read()

    def create_channel(self) -> None:
        self.post("/topic/create?topic=sub_bench")
        self.post("/channel/create?topic=sub_bench&channel=ch")

    def cpu(self) -> float:
        """CPU seconds so far, with the I/O workers'; the broker process's own are noted for broker_share."""
        self._own_marks.append(own_cpu_seconds(self.proc.pid))
        self._cpu_marks.append(cpu_seconds(self.proc.pid))
        return self._cpu_marks[-1]

    def broker_share(self) -> float | None:
        """Of the CPU between the last two cpu() calls, the part the broker process itself used (None without
        I/O workers)."""
        own = self._own_marks[-1] - self._own_marks[-2]
        total = self._cpu_marks[-1] - self._cpu_marks[-2]
        return own / total if total and own != total else None

    def stop(self, keep_data: bool = False) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if not keep_data:
            shutil.rmtree(self.data, ignore_errors=True)


@dataclass
class Result:
    rate: float  # per second (messages or requests)
    cpu_us: float  # server CPU per message/request, microseconds
    extra: str = ""
    #: with I/O workers: the broker process's part of cpu_us
    broker_share: float | None = None

    def describe(self) -> str:
        share = "" if self.broker_share is None else f"(broker {self.broker_share * 100:.0f}%) "
        return share + self.extra


@dataclass
class Load:
    """The load generators: Go's bench_writer/bench_reader, or bench/'s Python ones."""

    go_dir: Path | None
    runfor: float

    def _cmd(self, tool: str) -> list[str]:
        if self.go_dir is not None:
            return [str(self.go_dir / tool)]
        return [sys.executable, str(HERE / f"{tool}.py")]

    def write(self, server: Server, seconds: float) -> float:
        out = subprocess.run([*self._cmd("bench_writer"), f"--nsqd-tcp-address=127.0.0.1:{server.tcp}",
                              f"--runfor={seconds}s", "--size=200", "--batch-size=200"],
                             capture_output=True, text=True, timeout=seconds + 120)
        return _ops(out.stdout + out.stderr)

    def read(self, server: Server, seconds: float) -> float:
        return self.reading(server, seconds)()

    def reading(self, server: Server, seconds: float, channel: str = "ch") -> Callable[[], float]:
        """A bench_reader started on ``channel``; the call waits for its end and gives its ops/s."""
        proc = subprocess.Popen([*self._cmd("bench_reader"), f"--nsqd-tcp-address=127.0.0.1:{server.tcp}",
                                 f"--runfor={seconds}s", "--size=200", f"--channel={channel}"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def finished() -> float:
            out, _ = proc.communicate(timeout=seconds + 120)
            return _ops(out)
        return finished


def _ops(text: str) -> float:
    found = _OPS.findall(text)
    if not found:
        raise RuntimeError(f"no ops/s in the load generator's output:\n{text[-2000:]}")
    return float(found[-1])


def publish(binary: Path, load: Load, memq: int, *flags: str) -> Result:
    server = Server(binary, f"--mem-queue-size={memq}", *flags)
    try:
        server.create_channel()
        before = server.cpu()
        rate = load.write(server, load.runfor)
        used = server.cpu() - before
        return Result(rate, used / (rate * load.runfor) * 1e6, broker_share=server.broker_share())
    finally:
        server.stop()


def consume(binary: Path, load: Load, memq: int, *flags: str) -> Result:
    """Drain a backlog written first (the issue's 'consume' rows). With ``flags`` the backlog is written at memq 0
    without them (a durable writer would leave Go too small a backlog to time), and read after a restart with them."""
    server = Server(binary, f"--mem-queue-size={memq}")
    if flags:
        server.create_channel()
        load.write(server, load.runfor)
        server.stop(keep_data=True)
        server = Server(binary, f"--mem-queue-size={memq}", *flags, data=server.data)
    try:
        if not flags:
            server.create_channel()
            load.write(server, load.runfor)
        before = server.cpu()
        seconds = max(2.0, load.runfor / 2)
        rate = load.read(server, seconds)
        used = server.cpu() - before
        return Result(rate, used / (rate * seconds) * 1e6, broker_share=server.broker_share())
    finally:
        server.stop()


def fan_out(binary: Path, load: Load, channels: int) -> Result:
    """One topic feeding ``channels`` channels live: one bench_reader per channel, subscribed first, while
    bench_writer publishes (MPUB 200); the row's rate is messages delivered per second over all channels, its CPU per
    delivered message."""
    server = Server(binary, "--mem-queue-size=1000000")
    try:
        server.post("/topic/create?topic=sub_bench")
        names = [f"ch{i}" for i in range(channels)]
        for name in names:
            server.post(f"/channel/create?topic=sub_bench&channel={name}")
        before = server.cpu()
        readers = [load.reading(server, load.runfor, name) for name in names]
        time.sleep(0.5)  # every reader subscribed before the first message
        published = load.write(server, load.runfor)
        delivered = sum(reader() for reader in readers)
        used = server.cpu() - before
        return Result(delivered, used / (delivered * load.runfor) * 1e6, f"(published {published:.0f}/s)",
                      broker_share=server.broker_share())
    finally:
        server.stop()


def rss_with_backlog(binary: Path, load: Load, count: int = 1_000_000) -> Result:
    """RSS (reported as the row's value, MiB) once ``count`` 200-byte messages sit in one channel."""
    server = Server(binary, "--mem-queue-size=1000000")
    try:
        server.create_channel()
        batch = 1000
        body = batch.to_bytes(4, "big") + (len(_BODY).to_bytes(4, "big") + _BODY) * batch
        for _ in range(count // batch):  # exactly ``count``, the same for both servers
            server.post("/mpub?topic=sub_bench&binary=true", body)
        time.sleep(1)
        return Result(rss_mib(server.proc.pid), 0.0, f"(depth {_depth(server)})")
    finally:
        server.stop()


def _depth(server: Server) -> int:
    stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{server.http}/stats?format=json&topic=sub_bench",
                                              timeout=10).read())
    return stats["topics"][0]["channels"][0]["depth"] if stats["topics"] else 0


def pub_connections(binary: Path, load: Load, *flags: str, connections: int = 32) -> Result:
    """Single-message PUBs from ``connections`` connections, each sending its next PUB once its OK arrived
    (bench/round_trip.py, from two processes); PUB latency percentiles beside the rate."""
    server = Server(binary, *flags)
    try:
        server.create_channel()
        before = server.cpu()
        outcome = round_trip.pub_loop(server.tcp, connections, load.runfor)
        used = server.cpu() - before
        return Result(outcome.rate(), used / outcome.count * 1e6, outcome.summary(), broker_share=server.broker_share())
    finally:
        server.stop()


def rdy1_consume(binary: Path, load: Load, connections: int) -> Result:
    """Consumers at RDY 1 (FIN, then the next message) drain a backlog written first with MPUB."""
    server = Server(binary, "--mem-queue-size=1000000")
    try:
        server.create_channel()
        load.write(server, max(1.0, load.runfor / 4))
        before = server.cpu()
        outcome = round_trip.rdy1_consume(server.tcp, connections, load.runfor)
        used = server.cpu() - before
        return Result(outcome.rate(), used / outcome.count * 1e6, broker_share=server.broker_share())
    finally:
        server.stop()


def deliver_latency(binary: Path, load: Load, rate: int, consumers: int) -> Result:
    """p99 (the row's value, us) from publish (nsqd's timestamp in the message) to receipt by consumers at RDY 1,
    while one producer PUBs ``rate`` messages/s and waits for each OK; p50, p99.9 and max beside it."""
    server = Server(binary)
    try:
        server.post("/topic/create?topic=latency")
        server.post("/channel/create?topic=latency&channel=ch")
        before = server.cpu()
        outcome = paced.publish_to_deliver(server.tcp, rate, consumers, load.runfor)
        used = server.cpu() - before
        return Result(outcome.p99, used / (rate * load.runfor) * 1e6, outcome.summary(),
                      broker_share=server.broker_share())
    finally:
        server.stop()


_GOCLIENT_LINE = re.compile(r"msgs=(\d+)\b.*?rate=([0-9.]+)(?: p50=([0-9.]+)us p99=([0-9.]+)us)?")


def go_nsq(binary: Path, load: Load, mode: str, connections: int) -> Result | None:
    """go-nsq v1.1.0 itself, as applications use it (goclient from --go-dir): ``pub``, ``connections`` producers
    in Publish() loops; ``sub``, ``connections`` consumers at max-in-flight 1 draining a backlog that bench_writer
    wrote first. The server's CPU per message over goclient's run."""
    if load.go_dir is None or not (load.go_dir / "goclient").exists():
        return None
    server = Server(binary, "--mem-queue-size=1000000")
    try:
        server.post("/topic/create?topic=sub_bench")
        server.post("/channel/create?topic=sub_bench&channel=ch")
        if mode == "sub":
            load.write(server, max(1.0, load.runfor / 4))
        before = server.cpu()
        out = subprocess.run([str(load.go_dir / "goclient"), "-nsqd", f"127.0.0.1:{server.tcp}", "-mode", mode,
                              "-topic", "sub_bench", "-conns", str(connections), "-max-in-flight", "1",
                              "-prefill", "0", "-duration", f"{load.runfor}s"],
                             capture_output=True, text=True, timeout=load.runfor + 120)
        used = server.cpu() - before
        found = _GOCLIENT_LINE.search(out.stdout)
        if found is None:
            raise RuntimeError(f"goclient printed no result: {(out.stdout + out.stderr)[-300:]!r}")
        count, rate = int(found.group(1)), float(found.group(2))
        latency = f"(us: p50 {found.group(3)}, p99 {found.group(4)})" if found.group(3) else ""
        return Result(rate, used / count * 1e6 if count else 0.0, latency, broker_share=server.broker_share())
    finally:
        server.stop()


#: offered single-PUB rates, stepped up until the p99 passes RATE_HELD_P99_US or the producers fall behind
RATE_STEPS = (5_000, 7_500, 10_000, 12_500, 15_000, 17_500, 20_000, 25_000, 30_000, 40_000)
RATE_HELD_P99_US = 1000.0


def rate_held(binary: Path, load: Load, producers: int = 32, consumers: int = 8) -> Result:
    """The highest offered rate of single PUBs (from ``producers`` connections, each waiting for its OK) that the
    server delivers to ``consumers`` at RDY 1 with a publish-to-deliver p99 within 1 ms, the producers keeping 95 % of
    the offer; each step runs --runfor seconds (at least 2), on one server. Its CPU per message, and the step
    after it, beside the rate."""
    server = Server(binary)
    try:
        server.post("/topic/create?topic=latency")
        server.post("/channel/create?topic=latency&channel=ch")
        seconds = max(2.0, load.runfor)
        held, cpu_us, note = 0, 0.0, ""
        for rate in RATE_STEPS:
            before = server.cpu()
            outcome = paced.publish_to_deliver(server.tcp, rate, consumers, seconds, producers)
            used = server.cpu() - before
            if outcome.p99 > RATE_HELD_P99_US or outcome.published_rate < 0.95 * rate:
                note = f"(next step {rate}/s: {outcome.summary()[1:]}"
                break
            held, cpu_us = rate, used / (rate * seconds) * 1e6
        return Result(held, cpu_us, note, broker_share=server.broker_share())
    finally:
        server.stop()


def http_pub(binary: Path, load: Load, *flags: str, cpus: set[int] | None = None) -> Result | None:
    """wrk -c32 POST /pub; ``cpus``: server and wrk both pinned there (one core: no cross-core wakeups)."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    server = Server(binary, *flags, cpus=cpus)
    try:
        before = server.cpu()
        out = subprocess.run([wrk, "-t1", "-c32", f"-d{int(load.runfor)}s", "-s", str(HERE / "wrk_pub.lua"),
                              f"http://127.0.0.1:{server.http}/pub?topic=http_bench"],
                             capture_output=True, text=True, timeout=load.runfor + 60, preexec_fn=pinned_to(cpus))
        used = server.cpu() - before
        rate = float(re.search(r"Requests/sec:\s+([0-9.]+)", out.stdout).group(1))  # type: ignore[union-attr]
        return Result(rate, used / (rate * load.runfor) * 1e6, broker_share=server.broker_share())
    finally:
        server.stop()


@dataclass
class Row:
    name: str
    run: Callable[[Path, Load], Result | None]
    unit: str = "/s"
    #: each server's results by its name ("ours", "ours+N workers", "go")
    results: dict[str, list[Result]] = field(default_factory=dict)

    @property
    def go(self) -> list[Result]:
        return self.results.get("go", [])


def _spread(row: Row, who: str, attr: str) -> str:
    """The lowest and highest per-round ratio of ``who`` to go of ``attr``."""
    pairs = zip(row.results[who], row.go, strict=False)  # a round whose Go run failed has no pair
    ratios = [getattr(o, attr) / getattr(g, attr) for o, g in pairs if getattr(g, attr)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go-dir", type=Path, help="directory with Go's nsqd, bench_writer, bench_reader")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per server (alternating)")
    parser.add_argument("--runfor", type=float, default=4.0, help="seconds per load run")
    parser.add_argument("--nsqd", type=Path, default=OURS, help="our nsqd executable")
    parser.add_argument("--skip-rss", action="store_true", help="leave out the 1M-message RSS row")
    parser.add_argument("--only", default="", help="run only the rows whose name contains this text (or one of "
                        "several, separated by |)")
    parser.add_argument("--io-workers", type=int, default=0,
                        help="also run ours with NSQD_PY_IO_WORKERS=N, in the same alternation")
    parser.add_argument("--also", action="append", default=[], metavar="NAME=EXECUTABLE",
                        help="another nsqd in the same alternation (an older build, or a script that execs ours with "
                             "more flags), tabled against Go like ours; may be given more than once")
    args = parser.parse_args()
    load = Load(args.go_dir, args.runfor)
    rows = [
        Row("TCP publish (MPUB 200 x 200 B)", lambda b, ld: publish(b, ld, 1_000_000)),
        Row("TCP consume (backlog)", lambda b, ld: consume(b, ld, 1_000_000)),
        Row("publish, memq 0", lambda b, ld: publish(b, ld, 0)),
        Row("consume, memq 0", lambda b, ld: consume(b, ld, 0)),
        Row("HTTP POST /pub (wrk -c32)", http_pub),
        Row("HTTP /pub, server+wrk on 1 core", lambda b, ld: http_pub(b, ld, cpus={0})),
        Row("PUB, 32 connections", pub_connections),
        Row("PUB, 4 connections", lambda b, ld: pub_connections(b, ld, connections=4)),
        Row("RDY 1 consume, 1 connection", lambda b, ld: rdy1_consume(b, ld, 1)),
        Row("RDY 1 consume, 8 connections", lambda b, ld: rdy1_consume(b, ld, 8)),
        Row("go-nsq Publish(), 32 producers", partial(go_nsq, mode="pub", connections=32)),
        Row("go-nsq, 8 consumers at max-in-flight 1", partial(go_nsq, mode="sub", connections=8)),
        Row("fan-out, 1 channel, live", lambda b, ld: fan_out(b, ld, 1)),
        Row("fan-out, 8 channels, live", lambda b, ld: fan_out(b, ld, 8)),
        Row("rate held at p99 <= 1 ms, 32 PUB, 8 RDY 1", rate_held),
        Row("durable MPUB (bench_writer)", lambda b, ld: publish(b, ld, 0, "--sync-every=1")),
        Row("durable PUB, 32 connections", lambda b, ld: pub_connections(b, ld, *DURABLE)),
        Row("durable HTTP /pub (wrk -c32)", lambda b, ld: http_pub(b, ld, *DURABLE)),
        Row("durable consume", lambda b, ld: consume(b, ld, 0, "--sync-every=1")),
        *(Row(f"pub->deliver p99, {rate // 1000}k/s, {n} RDY 1", partial(deliver_latency, rate=rate, consumers=n),
              unit="us") for rate in (1000, 5000, 20000) for n in (1, 8)),
    ]
    if not args.skip_rss:
        rows.append(Row("RSS, 1M x 200 B queued", rss_with_backlog, unit="MiB"))
    wanted = args.only.lower().split("|")
    rows = [row for row in rows if any(text in row.name.lower() for text in wanted)]
    servers: list[tuple[str, Path, str]] = [("ours", args.nsqd, "0")]
    if args.io_workers:
        servers.append((f"ours+{args.io_workers}w", args.nsqd, str(args.io_workers)))
    for also in args.also:
        name, _, executable = also.partition("=")
        servers.append((name, Path(executable), "0"))
    if args.go_dir:
        servers.append(("go", args.go_dir / "nsqd", "0"))
    for round_no in range(args.rounds):
        for who, binary, workers in servers:
            os.environ["NSQD_PY_IO_WORKERS"] = workers  # Go's nsqd ignores it
            for row in rows:
                result = row.run(binary, load)
                if result is not None:
                    row.results.setdefault(who, []).append(result)
                    print(f"round {round_no + 1} {who:8s} {row.name:32s} {result.rate:12.0f}{row.unit:3s}  "
                          f"{result.cpu_us:7.2f} us/op {result.describe()}", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.2f} (2 cores), {args.rounds} alternating rounds, "
          f"load from {'Go' if args.go_dir else 'Python'} bench tools, {time.strftime('%Y-%m-%d')}")
    print("medians of the rounds; a spread is the lowest and highest ratio of round i's ours to round i's go")
    for who, _, _ in servers:
        if who != "go":
            _print_table(rows, who)


def _print_table(rows: list[Row], who: str) -> None:
    print(f"\n{'workload':32s} {who:>12s} {'us/op':>7s} {'go':>12s} {'us/op':>7s} {'ratio':>6s} {'spread':>11s} "
          f"{'cpu ratio':>9s} {'spread':>11s}")
    for row in rows:
        ours = row.results.get(who)
        if not ours:
            continue
        ours_rate = statistics.median(r.rate for r in ours)
        ours_cpu = statistics.median(r.cpu_us for r in ours)
        line = f"{row.name:32s} {ours_rate:12.0f} {ours_cpu:7.2f}"
        if row.go:
            go_rate = statistics.median(r.rate for r in row.go)
            go_cpu = statistics.median(r.cpu_us for r in row.go)
            ratio = ours_rate / go_rate if go_rate else 0.0
            cpu_ratio = ours_cpu / go_cpu if go_cpu else 0.0
            line += (f" {go_rate:12.0f} {go_cpu:7.2f} {ratio:5.2f}x {_spread(row, who, 'rate'):>11s} "
                     f"{cpu_ratio:8.2f}x {_spread(row, who, 'cpu_us'):>11s}")
        extra = " ".join(r.describe() for r in ours + row.go if r.describe())
        print(line + (f"  {extra}" if extra else ""))


if __name__ == "__main__":
    main()
