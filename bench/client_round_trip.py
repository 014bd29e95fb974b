"""Python clients doing one message per round trip: pynsq's Writer/Reader and nsqd_py.client's Producer/Consumer.

    .venv/bin/python bench/client_round_trip.py                                   # against our nsqd
    .venv/bin/python bench/client_round_trip.py --go-dir ../shared/reference-go   # and Go's, alternating

Per client and server: a publish loop (one PUB, wait for its OK, the next) with its latency percentiles, and a
consumer at max-in-flight 1 draining a backlog (FIN, then the next message). Each run is a fresh process of its
own against a fresh server; the client's own CPU per message is printed beside the server's, so it shows which
side is the slow one.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from compare_go import OURS, Load, Server

_BODY = b"x" * 200


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _report(count: int, seconds: float, cpu: float, latencies: list[float]) -> None:
    values = sorted(latencies) or [0.0]
    print(json.dumps({"count": count, "seconds": seconds, "client_cpu": cpu,
                      "p50": values[len(values) // 2], "p99": values[min(len(values) - 1, int(0.99 * len(values)))]}))


# ---- workers (run in a process of their own) --------------------------------------------------------------

def nsqd_py_publish(port: int, seconds: float) -> None:
    from nsqd_py.client import Producer

    with Producer(f"127.0.0.1:{port}") as producer:
        producer.connect()
        latencies = []
        cpu, start = _client_cpu(), time.perf_counter()
        end = start + seconds
        while (now := time.perf_counter()) < end:
            producer.pub("pub_bench", _BODY)
            latencies.append((time.perf_counter() - now) * 1e6)
        _report(len(latencies), time.perf_counter() - start, _client_cpu() - cpu, latencies)


def nsqd_py_consume(port: int, seconds: float) -> None:
    from nsqd_py.client import Consumer

    consumer = Consumer("sub_bench", "ch", nsqd_tcp_addresses=[f"127.0.0.1:{port}"], max_in_flight=1)
    consumer.connect()
    count = 0
    cpu, start = _client_cpu(), time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for msg in consumer.poll(0.5):
            consumer.fin(msg)
            count += 1
    _report(count, time.perf_counter() - start, _client_cpu() - cpu, [])
    consumer.close()


def pynsq_publish(port: int, seconds: float) -> None:
    import nsq
    from tornado.ioloop import IOLoop

    loop = IOLoop.current()
    writer = nsq.Writer([f"127.0.0.1:{port}"])
    latencies: list[float] = []
    state = {"start": 0.0, "end": 0.0, "sent": 0.0, "cpu": 0.0}

    def publish() -> None:
        state["sent"] = time.perf_counter()
        writer.pub("pub_bench", _BODY, answered)

    def answered(_conn: object, data: object) -> None:
        now = time.perf_counter()
        if isinstance(data, nsq.Error):
            raise SystemExit(f"PUB failed: {data}")
        latencies.append((now - state["sent"]) * 1e6)
        if now < state["end"]:
            publish()
        else:
            _report(len(latencies), now - state["start"], _client_cpu() - state["cpu"], latencies)
            loop.stop()

    def begin() -> None:
        if not writer.conns:
            loop.call_later(0.05, begin)
            return
        state["cpu"], state["start"] = _client_cpu(), time.perf_counter()
        state["end"] = state["start"] + seconds
        publish()

    loop.call_later(0.05, begin)
    loop.start()


def pynsq_consume(port: int, seconds: float) -> None:
    import nsq
    from tornado.ioloop import IOLoop

    loop = IOLoop.current()
    state = {"count": 0, "start": 0.0, "cpu": 0.0}

    def handle(_message: object) -> bool:
        if not state["count"]:
            state["cpu"], state["start"] = _client_cpu(), time.perf_counter()
            loop.call_later(seconds, finish)
        state["count"] += 1
        return True

    def finish() -> None:
        _report(state["count"], time.perf_counter() - state["start"], _client_cpu() - state["cpu"], [])
        loop.stop()

    nsq.Reader(topic="sub_bench", channel="ch", nsqd_tcp_addresses=[f"127.0.0.1:{port}"], message_handler=handle,
               max_in_flight=1)
    loop.start()


WORKERS = {
    "nsqd_py.client Producer.pub": (nsqd_py_publish, False),
    "nsqd_py.client Consumer, max-in-flight 1": (nsqd_py_consume, True),
    "pynsq Writer.pub": (pynsq_publish, False),
    "pynsq Reader, max-in-flight 1": (pynsq_consume, True),
}


# ---- driver -------------------------------------------------------------------------------------------------

def run(binary: Path, load: Load, name: str, seconds: float) -> dict:
    _worker, needs_backlog = WORKERS[name]
    server = Server(binary, "--mem-queue-size=1000000")
    try:
        server.create_channel()
        if needs_backlog:
            load.write(server, 1.0)
        before = server.cpu()
        out = subprocess.run([sys.executable, __file__, "--worker", name, "--port", str(server.tcp),
                              "--seconds", str(seconds)], capture_output=True, text=True, timeout=seconds + 60)
        used = server.cpu() - before
        if out.returncode:
            raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        result["server_cpu"] = used
        return result
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go-dir", type=Path, help="directory with Go's nsqd and bench_writer")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        WORKERS[args.worker][0](args.port, args.seconds)
        return
    load = Load(args.go_dir, args.seconds)
    servers = [("ours", OURS)] + ([("go", args.go_dir / "nsqd")] if args.go_dir else [])
    results: dict[tuple[str, str], list[dict]] = {}
    for round_no in range(args.rounds):
        for who, binary in servers:
            for name in WORKERS:
                r = run(binary, load, name, args.seconds)
                results.setdefault((name, who), []).append(r)
                per_msg = 1e6 / r["count"]
                print(f"round {round_no + 1} {who:4s} {name:42s} {r['count'] / r['seconds']:9.0f} msg/s  client "
                      f"{r['client_cpu'] * per_msg:6.1f} us/msg  server {r['server_cpu'] * per_msg:6.1f} us/msg  "
                      f"p50 {r['p50']:.0f} us  p99 {r['p99']:.0f} us", flush=True)
    print(f"\nmedians of {args.rounds} rounds; ratio = ours / Go")
    for name in WORKERS:
        line = f"{name:42s}"
        rates = {}
        for who, _binary in servers:
            runs = results[(name, who)]
            rates[who] = statistics.median(r["count"] / r["seconds"] for r in runs)
            line += f"  {who} {rates[who]:8.0f}/s"
        if "go" in rates:
            line += f"  ratio {rates['ours'] / rates['go']:.2f}x"
        print(line)


if __name__ == "__main__":
    main()
