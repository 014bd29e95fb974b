"""Many topics: creating them, publishing over all of them, and what they cost at rest; ours against Go's nsqd.

    .venv/bin/python bench/bench_many_topics.py --go ../shared/reference-go/nsqd            # 2,000 x 5, 2 rounds
    .venv/bin/python bench/bench_many_topics.py --go ../shared/reference-go/nsqd --topics 500

Each round starts a fresh server of each kind (ours, then Go's, alternating) and measures, in order:
- creating ``--topics`` topics with ``--channels`` channels each over HTTP (/topic/create, /channel/create), from one
  keep-alive connection (each create waits for the last), then as many again from 16 connections at once;
- single PUBs (200 B) from 8 connections, each PUB to the next topic round robin (bench/round_trip.py);
- the server's RSS, its CPU at rest over 5 s and the time of a full /stats JSON.
Every create writes nsqd.dat (both servers rewrite it whole), so a create's cost grows with the topics there are.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import round_trip
from compare_go import OURS, Server, rss_mib

PARALLEL_CREATORS = 16
PUB_CONNECTIONS = 8


def _create(port: int, names: list[str], channels: int) -> None:
    """Create each topic and its channels from one keep-alive connection, a request at a time."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for name in names:
        for target in [f"/topic/create?topic={name}",
                       *(f"/channel/create?topic={name}&channel=c{i}" for i in range(channels))]:
            conn.request("POST", target)
            reply = conn.getresponse()
            reply.read()
            if reply.status != 200:
                raise RuntimeError(f"{target}: {reply.status}")
    conn.close()


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def one_round(binary: Path, topics: int, channels: int, runfor: float) -> dict[str, float]:
    server = Server(binary)
    try:
        first = [f"s{i}" for i in range(topics)]
        second = [f"p{i}" for i in range(topics)]
        result = {"create one connection (s)": _timed(lambda: _create(server.http, first, channels))}
        parts = [second[i::PARALLEL_CREATORS] for i in range(PARALLEL_CREATORS)]
        with ThreadPoolExecutor(PARALLEL_CREATORS) as pool:
            result["create 16 connections (s)"] = _timed(
                lambda: list(pool.map(lambda part: _create(server.http, part, channels), parts)))
        before = server.cpu()
        outcome = round_trip.pub_loop(server.tcp, PUB_CONNECTIONS, runfor, topics=tuple(first))
        result["PUB round robin (/s)"] = outcome.rate()
        result["PUB CPU per op (us)"] = (server.cpu() - before) / outcome.count * 1e6
        result["RSS (MiB)"] = rss_mib(server.proc.pid)
        before = server.cpu()
        time.sleep(5)
        result["CPU at rest (%)"] = (server.cpu() - before) / 5 * 100
        stats_times = []
        for _ in range(5):
            conn = http.client.HTTPConnection("127.0.0.1", server.http, timeout=60)
            stats_times.append(_timed(lambda c=conn: (c.request("GET", "/stats?format=json"), c.getresponse().read())))
            conn.close()
        result["/stats JSON (ms)"] = statistics.median(stats_times) * 1000
        return result
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go", type=Path, help="Go's nsqd executable (left out: ours alone)")
    parser.add_argument("--nsqd", type=Path, default=OURS, help="our nsqd executable")
    parser.add_argument("--topics", type=int, default=2000)
    parser.add_argument("--channels", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runfor", type=float, default=5.0, help="seconds of round-robin PUBs")
    args = parser.parse_args()
    servers = {"ours": args.nsqd, **({"go": args.go} if args.go else {})}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    for number in range(args.rounds):
        for name, binary in servers.items():
            results[name].append(one_round(binary, args.topics, args.channels, args.runfor))
            print(f"round {number + 1} {name}: {results[name][-1]}", file=sys.stderr, flush=True)
    print(f"{args.topics} topics x {args.channels} channels, {args.rounds} rounds, load {os.getloadavg()[0]:.2f}")
    print("| | " + " | ".join(servers) + (" | ours/Go |" if args.go else " |"))
    print("|---" * (len(servers) + 1 + bool(args.go)) + "|")
    for key in results["ours"][0]:
        cells = []
        for name in servers:
            values = [r[key] for r in results[name]]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
        if args.go:
            ours, go = (statistics.median(r[key] for r in results[name]) for name in ("ours", "go"))
            cells.append(f"{ours / go:.2f}x")
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
