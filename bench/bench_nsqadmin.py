"""nsqadmin response times, ours against Go's, on the same cluster (issue 32).

    .venv/bin/python bench/bench_nsqadmin.py                                   # ours only
    .venv/bin/python bench/bench_nsqadmin.py --go-dir ../shared/reference-go  # + Go's nsqadmin, same cluster
    .venv/bin/python bench/bench_nsqadmin.py --topics 3 --channels 1 --requests 5 --rounds 1   # a quick check

The cluster: one nsqlookupd and two nsqd (ours, or Go's with ``--cluster go``), both registered with the lookupd,
on free loopback ports with temporary data dirs. On each nsqd the bench creates ``--topics`` topics with
``--channels`` channels each (HTTP /topic/create, /channel/create) and publishes ``--messages`` messages to every
topic (so depths are not zero), then waits until the lookupd knows every topic, channel and producer.

Our nsqadmin and, with ``--go-dir``, Go's are started against the same lookupd (``--lookupd-http-address``).
Rounds alternate which nsqadmin goes first; in each round and for each endpoint, each nsqadmin gets 3 warm-up
requests and then ``--requests`` sequential requests over one keep-alive connection (re-opened when the server
closes it). Every answer is checked: status 200, and the same number of topics / nodes / channels / messages
as the cluster has (so no number comes from an error page).

Endpoints: /api/topics; the topics page (ours ``/`` renders the table on the server; Go's ``/`` is only its
single-page app's shell, which renders in the browser from /api/topics, so ours' ``/`` is compared with Go's
``/`` and with Go's ``/api/topics``); /api/topics/<one topic> (asks both nsqd for /stats); /api/nodes.

Printed per endpoint: median, p90 and p99 of each side in ms, the ratio ours/Go of the medians (over all rounds)
with its spread (lowest and highest ratio of round i's medians), and the CPU per request of each nsqadmin
process (psutil, user+system) and of the cluster behind it (lookupd + both nsqd), plus the load average before
and after. Server logs go to a temp dir (kept with ``--keep-logs``); WARN/ERROR lines of the nsqadmins are counted.
"""

from __future__ import annotations

import argparse
import http.client
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
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from benchlib import percentiles

REPO = Path(__file__).resolve().parent.parent
OURS_BIN = REPO / ".venv" / "bin"
WARMUP = 3
_TOPIC_LINK = re.compile(r'<tr><td><a href="[^"]*?topics/([^"/]+)">')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


class Daemon:
    """One server process on loopback, its output in ``logdir/<name>.log``, ready once ``GET /ping`` answers."""

    def __init__(self, name: str, argv: list[str], http_port: int, logdir: Path) -> None:
        self.name = name
        self.http = f"127.0.0.1:{http_port}"
        self.log_path = logdir / f"{name}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"http://{self.http}/ping", timeout=1).read()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{name} ({argv[0]}) did not answer /ping within 30 s")

    def cpu(self) -> float:
        return cpu_seconds(self.ps)

    def get_json(self, path: str) -> Any:
        return json.loads(urllib.request.urlopen(f"http://{self.http}{path}", timeout=10).read())

    def post(self, path: str, body: bytes = b"") -> None:
        req = urllib.request.Request(f"http://{self.http}{path}", data=body, method="POST")
        urllib.request.urlopen(req, timeout=10).read()

    def log_problems(self) -> list[str]:
        text = self.log_path.read_text(errors="replace")
        return [line for line in text.splitlines() if "ERROR" in line or "WARN" in line or "panic" in line]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Cluster:
    """nsqlookupd + 2 nsqd registered with it, with the topics and channels created."""

    def __init__(self, bindir: Path, logdir: Path, nsqds: int = 2) -> None:
        self.daemons: list[Daemon] = []
        try:
            tcp, http_port = free_port(), free_port()
            self.lookupd = self._start("nsqlookupd", [str(bindir / "nsqlookupd"), f"--tcp-address=127.0.0.1:{tcp}",
                                                      f"--http-address=127.0.0.1:{http_port}",
                                                      "--broadcast-address=127.0.0.1"], http_port, logdir)
            self.nsqds: list[Daemon] = []
            for i in range(nsqds):
                data = logdir / f"data{i}"
                data.mkdir()
                ntcp, nhttp = free_port(), free_port()
                self.nsqds.append(self._start(f"nsqd{i}", [
                    str(bindir / "nsqd"), f"--tcp-address=127.0.0.1:{ntcp}", f"--http-address=127.0.0.1:{nhttp}",
                    f"--data-path={data}", "--broadcast-address=127.0.0.1", f"--lookupd-tcp-address=127.0.0.1:{tcp}",
                ], nhttp, logdir))
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, argv: list[str], http_port: int, logdir: Path) -> Daemon:
        daemon = Daemon(name, argv, http_port, logdir)
        self.daemons.append(daemon)
        return daemon

    def populate(self, topics: list[str], channels: list[str], messages: int) -> None:
        body = b"\n".join(b"msg %d" % i for i in range(messages))
        for nsqd in self.nsqds:
            for topic in topics:
                nsqd.post(f"/topic/create?topic={topic}")
                for channel in channels:
                    nsqd.post(f"/channel/create?topic={topic}&channel={channel}")
                if messages:
                    nsqd.post(f"/mpub?topic={topic}", body)

    def wait_registered(self, topics: list[str], channels: list[str], timeout: float = 60.0) -> None:
        """Until lookupd lists both nsqd with every topic, and every topic's channels."""
        deadline = time.monotonic() + timeout
        want_topics, want_channels = set(topics), set(channels)
        pending = list(topics)
        while True:
            try:
                producers = self.lookupd.get_json("/nodes").get("producers") or []
                nodes_ok = (len(producers) == len(self.nsqds)
                            and all(want_topics <= set(p.get("topics") or []) for p in producers))
                while nodes_ok and pending:
                    got = self.lookupd.get_json(f"/channels?topic={pending[0]}").get("channels") or []
                    if not want_channels <= set(got):
                        break
                    pending.pop(0)
                if nodes_ok and not pending:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"lookupd does not know the whole cluster after {timeout:.0f} s "
                                   f"({len(pending)} topics without all channels)")
            time.sleep(0.2)

    def cpu(self) -> float:
        return sum(d.cpu() for d in self.daemons)

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


class Client:
    """Sequential GETs over one keep-alive connection, counting how often it had to be (re)opened."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.connects = 0

    def get(self, path: str) -> tuple[int, bytes]:
        if self.conn.sock is None:
            self.connects += 1
            self.conn.connect()
        try:
            self.conn.request("GET", path)
            resp = self.conn.getresponse()
            body = resp.read()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            self.conn.close()  # a keep-alive connection the server closed meanwhile: once more on a new one
            self.connects += 1
            self.conn.connect()
            self.conn.request("GET", path)
            resp = self.conn.getresponse()
            body = resp.read()
        if resp.will_close:
            self.conn.close()
        return resp.status, body

    def close(self) -> None:
        self.conn.close()


@dataclass
class Side:
    name: str  # "ours" / "go"
    admin: Daemon
    client: Client


Checker = Callable[[bytes], str | None]  # None when the body is right, else what is wrong


@dataclass
class Timing:
    latencies: list[float] = field(default_factory=list)  # seconds, all rounds
    round_medians: list[float] = field(default_factory=list)
    admin_cpu: float = 0.0  # seconds, all rounds
    cluster_cpu: float = 0.0
    requests: int = 0


@dataclass
class Endpoint:
    label: str
    paths: dict[str, str]  # side name -> path
    checks: dict[str, Checker]
    note: str = ""
    timings: dict[str, Timing] = field(default_factory=dict)


def check_json(want: Callable[[dict[str, Any]], str | None]) -> Checker:
    def check(body: bytes) -> str | None:
        try:
            data = json.loads(body)
        except ValueError:
            return f"not JSON: {body[:200]!r}"
        if not isinstance(data, dict):
            return f"not a JSON object: {body[:200]!r}"
        if data.get("message"):
            return f"warning message: {data['message']!r}"
        return want(data)

    return check


def want_topics(n: int) -> Checker:
    def want(data: dict[str, Any]) -> str | None:
        got = data.get("topics")
        return None if isinstance(got, list) and len(got) == n else f"topics: {got!r:.200} (want {n})"

    return check_json(want)


def want_topic(nodes: int, channels: int, messages: int) -> Checker:
    def want(data: dict[str, Any]) -> str | None:
        got = (len(data.get("nodes") or []), len(data.get("channels") or []), data.get("message_count"))
        return None if got == (nodes, channels, messages) else f"(nodes, channels, message_count) {got} " \
                                                              f"(want {(nodes, channels, messages)})"

    return check_json(want)


def want_nodes(n: int) -> Checker:
    def want(data: dict[str, Any]) -> str | None:
        got = data.get("nodes")
        return None if isinstance(got, list) and len(got) == n else f"nodes: {got!r:.200} (want {n})"

    return check_json(want)


def want_page(topics: list[str]) -> Checker:
    """Ours' topics page: an HTML table with one link per topic."""

    def check(body: bytes) -> str | None:
        found = set(_TOPIC_LINK.findall(body.decode(errors="replace")))
        want = {urllib.parse.quote(t) for t in topics}
        return None if found == want else f"topics page lists {len(found)} topics (want {len(want)})"

    return check


def want_html(body: bytes) -> str | None:
    """Go's ``/``: the app shell (no data in it, only that it is HTML)."""
    return None if b"<html" in body.lower() else f"not HTML: {body[:200]!r}"


def _shape(value: Any) -> Any:
    """The keys of a JSON answer: top level, and of the first element of each list of objects."""
    if not isinstance(value, dict):
        return type(value).__name__
    out: dict[str, Any] = {}
    for key, item in value.items():
        out[key] = _shape(item[0]) if isinstance(item, list) and item and isinstance(item[0], dict) else None
    return out


def _shape_diff(ours: Any, go: Any, where: str = "") -> list[str]:
    if not isinstance(ours, dict) or not isinstance(go, dict):
        return [] if ours == go else [f"{where or 'answer'}: ours {ours}, go {go}"]
    diffs = [f"{where}{k}: only ours" for k in ours.keys() - go.keys()]
    diffs += [f"{where}{k}: only go" for k in go.keys() - ours.keys()]
    for key in ours.keys() & go.keys():
        if ours[key] is not None or go[key] is not None:
            diffs += _shape_diff(ours[key], go[key], f"{where}{key}[0].")
    return sorted(diffs)


def compare_shapes(endpoints: list[Endpoint], sides: list[Side]) -> list[str]:
    """One answer of each side per JSON endpoint that both ask the same path: do their keys differ?"""
    lines = []
    for ep in endpoints:
        if ep.paths["ours"] != ep.paths["go"] or not ep.paths["ours"].startswith("/api/"):
            continue
        shapes = [_shape(json.loads(side.client.get(ep.paths[side.name])[1])) for side in sides]
        diffs = _shape_diff(shapes[0], shapes[1])
        lines.append(f"JSON keys of {ep.paths['ours']}: " + ("the same" if not diffs else "; ".join(diffs)))
    return lines


def request(side: Side, path: str, check: Checker) -> float:
    start = time.perf_counter()
    status, body = side.client.get(path)
    elapsed = time.perf_counter() - start
    if status != 200:
        raise RuntimeError(f"{side.name} GET {path}: status {status}: {body[:300]!r}")
    problem = check(body)
    if problem:
        raise RuntimeError(f"{side.name} GET {path}: {problem}")
    return elapsed


def run_round(endpoint: Endpoint, side: Side, cluster: Cluster, requests: int) -> None:
    path, check = endpoint.paths[side.name], endpoint.checks[side.name]
    for _ in range(WARMUP):
        request(side, path, check)
    admin_before, cluster_before = side.admin.cpu(), cluster.cpu()
    latencies = [request(side, path, check) for _ in range(requests)]
    timing = endpoint.timings.setdefault(side.name, Timing())
    timing.admin_cpu += side.admin.cpu() - admin_before
    timing.cluster_cpu += cluster.cpu() - cluster_before
    timing.requests += requests
    timing.latencies += latencies
    timing.round_medians.append(statistics.median(latencies))


def spread(ours: Timing, go: Timing) -> str:
    ratios = [o / g for o, g in zip(ours.round_medians, go.round_medians, strict=False) if g]
    return f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"


def print_report(endpoints: list[Endpoint], sides: list[str]) -> None:
    head = f"{'endpoint':36s} {'side':4s} {'median':>8s} {'p90':>8s} {'p99':>8s} {'admin cpu':>10s} " \
           f"{'cluster cpu':>11s} {'ratio':>7s} {'spread':>11s}"
    print(head)
    print(f"{'':36s} {'':4s} {'ms':>8s} {'ms':>8s} {'ms':>8s} {'ms/req':>10s} {'ms/req':>11s} {'ours/go':>7s}")
    for ep in endpoints:
        for i, name in enumerate(sides):
            t = ep.timings.get(name)
            if t is None or not t.latencies:
                continue
            pct = percentiles(t.latencies)
            line = (f"{ep.label if i == 0 else '':36s} {name:4s} {statistics.median(t.latencies) * 1e3:8.2f} "
                    f"{pct['p90'] * 1e3:8.2f} {pct['p99'] * 1e3:8.2f} {t.admin_cpu / t.requests * 1e3:10.3f} "
                    f"{t.cluster_cpu / t.requests * 1e3:11.3f}")
            go = ep.timings.get("go")
            if name == "go" and go and go.latencies:
                ours = ep.timings["ours"]
                ratio = statistics.median(ours.latencies) / statistics.median(go.latencies)
                line += f" {ratio:6.2f}x {spread(ours, go):>11s}"
            print(line)
        if ep.note:
            print(f"{'':36s} ({ep.note})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go-dir", type=Path, help="directory with Go's nsqadmin (and nsqd, nsqlookupd)")
    parser.add_argument("--cluster", choices=("ours", "go"), default="ours",
                        help="whose nsqlookupd and nsqd make the cluster (go: from --go-dir)")
    parser.add_argument("--topics", type=int, default=50, help="topics per nsqd")
    parser.add_argument("--channels", type=int, default=4, help="channels per topic")
    parser.add_argument("--messages", type=int, default=5, help="messages published to each topic on each nsqd")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (each times every endpoint on both sides)")
    parser.add_argument("--requests", type=int, default=50, help="timed sequential requests per endpoint and round")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temp dir with the servers' logs")
    args = parser.parse_args()
    if args.cluster == "go" and args.go_dir is None:
        parser.error("--cluster go needs --go-dir")
    if min(args.topics, args.channels, args.rounds, args.requests) < 1 or args.messages < 0:
        parser.error("--topics, --channels, --rounds and --requests must be at least 1")

    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="nsqadmin-bench-"))
    topics = [f"bench_topic_{i:03d}" for i in range(args.topics)]
    channels = [f"ch{i}" for i in range(args.channels)]
    cluster_bin = args.go_dir if args.cluster == "go" else OURS_BIN
    whose = "our" if args.cluster == "ours" else "Go"
    print(f"cluster: {whose} nsqlookupd + 2 nsqd ({cluster_bin}); {args.topics} topics x {args.channels} "
          f"channels on each nsqd, {args.messages} messages per topic per nsqd; logs in {tmp}", flush=True)
    cluster: Cluster | None = None
    sides: list[Side] = []
    failed = False
    try:
        cluster = Cluster(cluster_bin, tmp)
        t0 = time.monotonic()
        cluster.populate(topics, channels, args.messages)
        cluster.wait_registered(topics, channels)
        print(f"created and registered with lookupd in {time.monotonic() - t0:.1f} s", flush=True)
        admins = [("ours", OURS_BIN / "nsqadmin")] + ([("go", args.go_dir / "nsqadmin")] if args.go_dir else [])
        for name, binary in admins:
            port = free_port()
            admin = Daemon(f"nsqadmin-{name}", [str(binary), f"--http-address=127.0.0.1:{port}",
                                                f"--lookupd-http-address={cluster.lookupd.http}"], port, tmp)
            sides.append(Side(name, admin, Client(admin.http)))
        one = topics[len(topics) // 2]
        n_nsqd = len(cluster.nsqds)
        topic_check = want_topic(n_nsqd, args.channels, n_nsqd * args.messages)
        endpoints = [
            Endpoint("GET /api/topics", {"ours": "/api/topics", "go": "/api/topics"},
                     {"ours": want_topics(args.topics), "go": want_topics(args.topics)}),
            Endpoint("topics page: ours /, go / (shell)", {"ours": "/", "go": "/"},
                     {"ours": want_page(topics), "go": want_html},
                     note="Go's / is its single-page app's shell, without data; the browser then fetches "
                          "/api/topics and renders the list"),
            Endpoint("topics page: ours /, go /api/topics", {"ours": "/", "go": "/api/topics"},
                     {"ours": want_page(topics), "go": want_topics(args.topics)},
                     note="ours' server-rendered page against the data Go's page renders in the browser"),
            Endpoint(f"GET /api/topics/{one}", {"ours": f"/api/topics/{one}", "go": f"/api/topics/{one}"},
                     {"ours": topic_check, "go": topic_check}),
            Endpoint("GET /api/nodes", {"ours": "/api/nodes", "go": "/api/nodes"},
                     {"ours": want_nodes(n_nsqd), "go": want_nodes(n_nsqd)}),
        ]
        if len(sides) == 2:
            for line in compare_shapes(endpoints, sides):
                print(line, flush=True)
        for round_no in range(args.rounds):
            order = sides if round_no % 2 == 0 else sides[::-1]
            for ep in endpoints:
                for side in order:
                    run_round(ep, side, cluster, args.requests)
                    t = ep.timings[side.name]
                    print(f"round {round_no + 1} {side.name:4s} {ep.label:36s} median "
                          f"{t.round_medians[-1] * 1e3:8.2f} ms", flush=True)
        load_after = os.getloadavg()
        print(f"\nload average {load_before[0]:.2f} before, {load_after[0]:.2f} after ({os.cpu_count()} cores); "
              f"{args.rounds} rounds alternating which nsqadmin goes first, {args.requests} sequential requests "
              f"per endpoint per round after {WARMUP} warm-ups; {args.topics} topics x {args.channels} channels "
              f"on {n_nsqd} nsqd ({whose} cluster); {time.strftime('%Y-%m-%d')}")
        print("median/p90/p99 over all rounds; ratio = ours' median / Go's; spread = lowest and highest ratio of "
              "round i's medians; cpu = the nsqadmin process / lookupd + both nsqd, per request (psutil: clock ticks, "
              "10 ms, so small runs show 0 or steps)\n")
        print_report(endpoints, [s.name for s in sides])
        print()
        for side in sides:
            problems = side.admin.log_problems()
            print(f"{side.name} nsqadmin: {side.client.connects} TCP connection(s) opened; "
                  f"{len(problems)} WARN/ERROR log lines" + (f", e.g. {problems[0][:200]}" if problems else ""))
    except Exception:
        failed = True
        raise
    finally:
        for side in sides:
            side.client.close()
            side.admin.stop()
        if cluster is not None:
            cluster.stop()
        sys.stdout.flush()
        if args.keep_logs or failed:
            print(f"logs kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
