#!/usr/bin/env python3
"""Rows/s through the Spark "nsq" connector on local[2]: the source into Spark's no-op sink, the nsq-pipeline
events query, and the sink.

Starts --nsqd-count nsqd (the venv's, on free loopback ports, temp data dirs) unless --nsqd-tcp-address/
--nsqd-http-address point at one. Source: publish --messages bodies of --size bytes, then run a readStream with
trigger(availableNow=True) into format("noop") and time it (start to end, and the sum of the batches' own
durations; every batch counts: the session keeps all progress updates, not Spark's last 100), reading on the
executors (the default) and with readMode=driver, alternating, --rounds times each, on one nsqd. Scaling: the
executor reads by partition count (--scale-partitions), on one nsqd and with the messages spread over all.
Pipeline: the same number of --size-byte JSON events drained by nsq-pipeline's events query (dedupe, JSON, Parquet
by date/hour) with --available-now. Sink: spark.range(--messages) as --size-byte strings, df.write.format("nsq"),
then check the topic depth. Live (only with --only live): the events query on its processing-time trigger while --rate
events/s are published for --duration seconds, with the lag every second. Prints a table; --json prints the
numbers; --only picks some. Bare (only with --only bare): the source at its defaults against a bare subscription
(bench_reader.py, one connection at RDY 2500) of the same messages, alternating, after a cold first query, with
the CPU each spent per row by process (Spark's JVM, the Python processes it started, nsqd, the bench's driver,
bench_reader.py), counted from the publish's end to the read's. Batches (only with --only batches): --rounds queries
of --messages in a row at --batch rows per batch (50 000 unless given), each full batch's triggerExecution and
addBatch in ms, to tell the early batches of a fresh JVM (which compiles Spark's hot code meanwhile) from later ones;
--java-options passes spark.driver.extraJavaOptions (for example -XX:TieredStopAtLevel=1).

    .venv/bin/python bench/bench_spark.py --messages 200000 --size 200
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import requests
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from nsqd_py.client import Producer, nsqd_stats
from nsqd_py.spark import register, stop_gracefully
from nsqd_py.spark.pipeline import PipelineConfig, start_events


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nsqd(workdir: Path) -> tuple[subprocess.Popen, str, str]:
    workdir.mkdir(parents=True, exist_ok=True)
    tcp, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "nsqd"), f"--tcp-address={tcp}",
                             f"--http-address={http}", f"--data-path={workdir}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            requests.get(f"http://{http}/ping", timeout=1)
            return proc, tcp, http
        except requests.RequestException:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("nsqd did not start")


def depth(http: str, topic: str) -> int:
    """Messages of ``topic`` still in nsqd: queued in the topic or its channels, or in flight."""
    stats = nsqd_stats(http, topic, include_clients=False)
    return sum(t["depth"] + sum(c["depth"] + c["in_flight_count"] for c in t["channels"] or [])
               for t in stats["topics"] or [])


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far by process: Spark's JVM, the Python processes it started (those still running and those it
    has reaped, such as a query's source runner), nsqd, this driver (py4j included) and the processes it has reaped
    (bench_reader.py)."""
    me = psutil.Process()
    mine = me.cpu_times()
    seconds = {"jvm": 0.0, "python_workers": 0.0, "nsqd": 0.0, "driver": mine.user + mine.system,
               "bench_reader": mine.children_user + mine.children_system}
    for proc in me.children(recursive=True):
        try:
            times, cmdline, parents = proc.cpu_times(), proc.cmdline(), proc.parents()
        except psutil.Error:  # ended meanwhile: its parent's reaped time has it
            continue
        if proc.name() == "java":
            seconds["jvm"] += times.user + times.system
            seconds["python_workers"] += times.children_user + times.children_system
        elif any(parent.name() == "java" for parent in parents):
            seconds["python_workers"] += times.user + times.system + times.children_user + times.children_system
        elif any(part.endswith("/nsqd") for part in cmdline[:2]):
            seconds["nsqd"] += times.user + times.system
    return seconds


def cpu_per_row(before: dict[str, float], rows: int) -> dict[str, float]:
    """µs of CPU per row by process since ``before`` (cpu_seconds())."""
    after = cpu_seconds()
    return {name: (after[name] - before[name]) * 1e6 / max(1, rows) for name in after}


def publish(tcp: str, topic: str, bodies: list[bytes]) -> None:
    with Producer(tcp) as producer:
        for i in range(0, len(bodies), 1000):
            producer.mpub(topic, bodies[i:i + 1000])


def batch_stats(query: StreamingQuery, elapsed: float, verbose: bool) -> dict:
    progress = query.recentProgress
    if verbose:
        for p in progress:
            print(p.name, p.batchId, p.numInputRows, p.durationMs, file=sys.stderr)
    rows = sum(p.numInputRows for p in progress)
    batches_ms = sum(p.durationMs.get("triggerExecution", 0) for p in progress if "addBatch" in p.durationMs)
    # the first batch also starts Spark's Python processes: the rate once they run
    later = [p for p in progress[1:] if p.numInputRows]
    later_ms = sum(p.durationMs.get("triggerExecution", 0) for p in later)
    return {"rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed,
            "batches": sum(1 for p in progress if p.numInputRows),
            "batch_ms": [(p.numInputRows, p.durationMs.get("triggerExecution", 0), p.durationMs.get("addBatch", 0))
                         for p in progress if p.numInputRows],
            "rows_per_s_in_batches": rows / (batches_ms / 1000) if batches_ms else 0.0,
            "rows_per_s_after_first": sum(p.numInputRows for p in later) / (later_ms / 1000) if later_ms else 0.0}


def source_options(a: argparse.Namespace) -> dict[str, str]:
    options = dict(a.option)
    if a.batch:
        options["maxOffsetsPerTrigger"] = str(a.batch)
    if a.partitions:
        options["minPartitions"] = str(a.partitions)
    return options


def read_source(spark: SparkSession, a: argparse.Namespace, nodes: list[tuple[str, str]], **options: str) -> dict:
    """--messages bodies spread over ``nodes`` ((tcp, http) pairs), drained by format("nsq") into noop."""
    topic = f"spark_bench_src_{os.getpid()}_{time.monotonic_ns()}"
    share = a.messages // len(nodes)
    for tcp, _ in nodes:
        publish(tcp, topic, [b"x" * a.size] * share)
    with tempfile.TemporaryDirectory() as work:
        cpu = cpu_seconds()
        started = time.perf_counter()
        query = (spark.readStream.format("nsq").option("topic", topic).option("channel", "bench")
                 .option("nsqdTcpAddresses", ",".join(tcp for tcp, _ in nodes))
                 .option("nsqdHttpAddresses", ",".join(http for _, http in nodes))
                 .option("writeAheadLocation", f"{work}/write-ahead").options(**{**source_options(a), **options})
                 .load().writeStream.format("noop").option("checkpointLocation", f"{work}/checkpoint")
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        result = batch_stats(query, time.perf_counter() - started, a.verbose)
        result["cpu_us_per_row"] = cpu_per_row(cpu, result["rows"])
    return {**result, "left_in_nsqd": sum(depth(http, topic) for _, http in nodes)}


def bench_source(spark: SparkSession, a: argparse.Namespace, nodes: list[tuple[str, str]]) -> dict:
    """The default (read on the executors) and readMode=driver, alternating, --rounds times each."""
    rounds: dict[str, list[dict]] = {"executors": [], "driver": []}
    if a.cold:  # the session's first query at full size: it also starts the Python workers
        rounds["executors, cold"] = [read_source(spark, a, nodes[:1], readMode="executors")]
    for mode in ("executors", "driver"):  # each mode's first query starts Python processes of its own
        read_source(spark, argparse.Namespace(**{**vars(a), "messages": 1000}), nodes[:1], readMode=mode)
    for _ in range(a.rounds):
        for mode in ("executors", "driver"):
            rounds[mode].append(read_source(spark, a, nodes[:1], readMode=mode))
    return rounds


def bench_scaling(spark: SparkSession, a: argparse.Namespace, nodes: list[tuple[str, str]]) -> dict:
    """Executor reads by partition count: one nsqd, then every nsqd."""
    result = {}
    for count in a.scale_partitions:
        result[f"1 nsqd, {count} partitions"] = read_source(spark, a, nodes[:1], minPartitions=str(count))
        if len(nodes) > 1:
            result[f"{len(nodes)} nsqd, {count} partitions"] = read_source(spark, a, nodes, minPartitions=str(count))
    return result


def json_event(i: int, size: int) -> bytes:
    event = json.dumps({"user": f"user{i % 1000}", "amount": i / 100, "ts": time.time(), "pad": ""})
    return event.replace('"pad": ""', f'"pad": "{"p" * max(0, size - len(event))}"').encode()


def bench_pipeline(spark: SparkSession, a: argparse.Namespace, nodes: list[tuple[str, str]]) -> dict:
    """nsq-pipeline's events query (dedupe, JSON, Parquet by date/hour) draining the backlog."""
    [(tcp, http), *_] = nodes
    topic = f"spark_bench_pipe_{os.getpid()}"
    publish(tcp, topic, [json_event(i, a.size) for i in range(a.messages)])
    with tempfile.TemporaryDirectory() as lake:
        cfg = PipelineConfig(topics=(topic,), output=lake, nsqd_tcp_addresses=(tcp,), nsqd_http_addresses=(http,),
                             available_now=True,
                             schema="user string, amount double, ts double, pad string",
                             dedupe_window=a.dedupe_window, source_options=source_options(a))
        started = time.perf_counter()
        query = start_events(spark, cfg)
        query.awaitTermination()
        result = batch_stats(query, time.perf_counter() - started, a.verbose)
    return {**result, "left_in_nsqd": depth(http, topic)}


def bench_live(spark: SparkSession, a: argparse.Namespace, nodes: list[tuple[str, str]]) -> dict:
    """nsq-pipeline's events query at its default trigger while --rate events/s arrive for --duration seconds:
    the lag (published, not yet FINed) every second. A pipeline that keeps up has a flat lag."""
    [(tcp, http), *_] = nodes
    topic = f"spark_bench_live_{os.getpid()}"
    with tempfile.TemporaryDirectory() as lake:
        cfg = PipelineConfig(topics=(topic,), output=lake, nsqd_tcp_addresses=(tcp,), nsqd_http_addresses=(http,),
                             schema="user string, amount double, ts double, pad string",
                             dedupe_window=a.dedupe_window, trigger=a.trigger or PipelineConfig.trigger,
                             source_options=source_options(a))
        publish(tcp, topic, [json_event(0, a.size)])
        query = start_events(spark, cfg)
        while not query.recentProgress:  # subscribed and warm
            time.sleep(0.2)
        done = threading.Event()
        sent = [0]

        def produce() -> None:
            with Producer(tcp) as producer:
                started, chunk = time.perf_counter(), max(1, a.rate // 20)
                while not done.is_set() and time.perf_counter() - started < a.duration:
                    producer.mpub(topic, [json_event(sent[0] + i, a.size) for i in range(chunk)])
                    sent[0] += chunk
                    time.sleep(max(0.0, started + sent[0] / a.rate - time.perf_counter()))

        producer = threading.Thread(target=produce)
        started = time.perf_counter()
        producer.start()
        lag = []
        while producer.is_alive():
            time.sleep(1)
            lag.append(depth(http, topic))
        publish_s = time.perf_counter() - started
        while depth(http, topic) and time.perf_counter() - started < publish_s + 120:
            time.sleep(0.5)
        catch_up = time.perf_counter() - started - publish_s
        stop_gracefully(query, cfg.sources())
    return {"rate": a.rate, "published": sent[0], "publish_rate": sent[0] / publish_s, "lag_samples": lag,
            "max_lag": max(lag, default=0), "catch_up_s": catch_up, "left_in_nsqd": depth(http, topic)}


def bench_sink(spark: SparkSession, a: argparse.Namespace, nodes: list[tuple[str, str]]) -> dict:
    [(tcp, http), *_] = nodes
    topic = f"spark_bench_sink_{os.getpid()}"
    df = (spark.range(a.messages, numPartitions=2)
          .select(F.rpad(F.col("id").cast("string"), a.size, "x").alias("value")).cache())
    df.count()  # generate the rows outside the timing
    started = time.perf_counter()
    (df.write.format("nsq").mode("append").option("topic", topic).option("nsqdTcpAddresses", tcp)
     .options(**dict(a.option)).save())
    elapsed = time.perf_counter() - started
    df.unpersist()
    published = depth(http, topic)
    return {"rows": a.messages, "seconds": elapsed, "rows_per_s": a.messages / elapsed, "in_nsqd": published}


def read_bare(a: argparse.Namespace, nodes: list[tuple[str, str]]) -> dict:
    """--messages bodies drained by a bare subscription: bench_reader.py in its own process, one connection at
    RDY 2500 FINing everything (what a plain Python consumer does), timed from its start to its last message."""
    tcp, http = nodes[0]
    topic = f"spark_bench_bare_{os.getpid()}_{time.monotonic_ns()}"
    publish(tcp, topic, [b"x" * a.size] * a.messages)
    cpu = cpu_seconds()
    started = time.perf_counter()
    out = subprocess.run([sys.executable, str(Path(__file__).parent / "bench_reader.py"), f"--nsqd-tcp-address={tcp}",
                          f"--topic={topic}", "--channel=bench", "--procs=1", "--rdy=2500", f"--size={a.size}",
                          f"--expect={a.messages}", "--runfor=10m", "--json"],
                         check=True, capture_output=True, text=True).stdout
    seconds = time.perf_counter() - started
    summary = json.loads(out)
    return {"rows": summary["msgs"], "seconds": seconds, "rows_per_s": summary["msgs"] / seconds,
            "rows_per_s_subscribed": summary["msgs_per_s"], "left_in_nsqd": depth(http, topic),
            "cpu_us_per_row": cpu_per_row(cpu, summary["msgs"])}


def bench_bare(spark: SparkSession, a: argparse.Namespace, nodes: list[tuple[str, str]]) -> dict:
    """The source at its defaults against a bare subscription of the same messages, alternating --rounds times: first
    the session's first source query (cold: it starts the Python workers), then warm rounds."""
    result: dict[str, list[dict]] = {"source, cold": [read_source(spark, a, nodes[:1])], "source": [], "bare": []}
    for _ in range(a.rounds):
        result["bare"].append(read_bare(a, nodes))
        result["source"].append(read_source(spark, a, nodes[:1]))
    return result


def bench_batches(spark: SparkSession, a: argparse.Namespace, nodes: list[tuple[str, str]]) -> dict:
    """What one micro-batch of --batch rows (50 000 unless given) costs, in --rounds queries of --messages each, one
    after the other in the session: Spark's JVM compiles its hot code (C2) during the first million or so rows, on
    the cores the batches run on, so the early batches and the later ones are reported apart."""
    batched = argparse.Namespace(**{**vars(a), "batch": a.batch or 50_000})
    read_source(spark, argparse.Namespace(**{**vars(a), "messages": 1000}), nodes[:1])  # the Python workers up
    return {"queries": [read_source(spark, batched, nodes[:1]) for _ in range(a.rounds)]}


BENCHES = {"source": bench_source, "scaling": bench_scaling, "pipeline": bench_pipeline, "live": bench_live,
           "sink": bench_sink, "bare": bench_bare, "batches": bench_batches}


def print_read(label: str, r: dict) -> None:
    print(f"{label + ':':<34} {r['rows']:>8} rows in {r['seconds']:6.1f} s = {r['rows_per_s']:9.0f} rows/s "
          f"({r['batches']} batches; {r['rows_per_s_in_batches']:.0f} rows/s inside batches, "
          f"{r['rows_per_s_after_first']:.0f} after the first; {r['left_in_nsqd']} left in nsqd)")


def cpu_line(r: dict) -> str:
    return ", ".join(f"{name} {us:.1f}" for name, us in r["cpu_us_per_row"].items() if us >= 0.05)


def print_batches(queries: list[dict]) -> None:
    rows_before = 0
    for number, query in enumerate(queries, 1):
        size = max(rows for rows, _, _ in query["batch_ms"])
        full = [(total, add) for rows, total, add in query["batch_ms"] if rows == size]
        spread = ", ".join(f"{total}/{add}" for total, add in full)
        print(f"query {number} (after {rows_before} rows in the session): {len(full)} batches of {size} rows, "
              f"ms per batch (triggerExecution/addBatch): {spread}; "
              f"median {statistics.median(t for t, _ in full):.0f}/{statistics.median(ad for _, ad in full):.0f}; "
              f"CPU µs per row: {cpu_line(query)}")
        rows_before += query["rows"]


def print_versus_bare(rounds: dict[str, list[dict]]) -> None:
    for bare, source in zip(rounds["bare"], rounds["source"], strict=True):
        print(f"bare subscription: {bare['rows']:>8} rows in {bare['seconds']:6.1f} s = {bare['rows_per_s']:9.0f} "
              f"rows/s ({bare['rows_per_s_subscribed']:.0f} once subscribed); source at defaults "
              f"{source['rows_per_s']:.0f} rows/s: {source['rows_per_s'] / bare['rows_per_s']:.2f}x")
        print(f"  CPU µs per row: bare: {cpu_line(bare)}; source: {cpu_line(source)}")
    cold, bare_median = rounds["source, cold"][0], statistics.median(r["rows_per_s"] for r in rounds["bare"])
    print(f"source, cold (the session's first query): {cold['rows_per_s']:.0f} rows/s = "
          f"{cold['rows_per_s'] / bare_median:.2f}x the bare median; CPU µs per row: {cpu_line(cold)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--size", type=int, default=100, help="body bytes")
    p.add_argument("--batch", type=int, help="maxOffsetsPerTrigger (default: the source's)")
    p.add_argument("--partitions", type=int, help="minPartitions (default: the source's); 2 write partitions")
    p.add_argument("--rounds", type=int, default=2, help="source: rounds of each read mode, alternating")
    p.add_argument("--nsqd-count", type=int, default=2, help="nsqd to start (scaling spreads the messages)")
    p.add_argument("--scale-partitions", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 4],
                   help="scaling: partition counts (default 1,2,4)")
    p.add_argument("--option", type=lambda kv: tuple(kv.split("=", 1)), action="append", default=[],
                   metavar="KEY=VALUE", help="another source (or, with --only sink, sink) option (repeatable)")
    p.add_argument("--cold", action="store_true",
                   help="source: first a full-size executor read as the session's first query (cold)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--nsqd-tcp-address")
    p.add_argument("--nsqd-http-address")
    p.add_argument("--dedupe-window", default=PipelineConfig.dedupe_window, help="the pipeline's; '' disables")
    p.add_argument("--trigger", help="live: the pipeline's trigger interval (default: its own)")
    p.add_argument("--rate", type=int, default=20_000, help="live: events/s published")
    p.add_argument("--duration", type=float, default=60.0, help="live: seconds of publishing")
    p.add_argument("--only", action="append", choices=BENCHES, help="run only these (repeatable)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", action="store_true", help="print every batch's phase durations (stderr)")
    p.add_argument("--java-options", default="", help="spark.driver.extraJavaOptions, e.g. -XX:TieredStopAtLevel=1")
    a = p.parse_args()

    servers = []
    workdir = tempfile.TemporaryDirectory()
    if a.nsqd_tcp_address and a.nsqd_http_address:
        nodes = [(a.nsqd_tcp_address, a.nsqd_http_address)]
    else:
        servers = [start_nsqd(Path(workdir.name) / str(i)) for i in range(a.nsqd_count)]
        nodes = [(tcp, http) for _, tcp, http in servers]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(a.master).appName("bench_spark").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.extraJavaOptions", a.java_options)
             # every batch counts, not only the last 100
             .config("spark.sql.streaming.numRecentProgressUpdates", "1000000").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        spark.range(10).count()  # JVM and Python workers warm
        result: dict = {"messages": a.messages, "size": a.size, "batch": a.batch, "master": a.master,
                        "load": os.getloadavg()[0]}
        for bench in a.only or ("source", "scaling", "pipeline", "sink"):
            result[bench] = BENCHES[bench](spark, a, nodes)
    finally:
        spark.stop()
        for proc, _, _ in servers:
            proc.terminate()
            proc.wait(30)
        workdir.cleanup()
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{a.messages} messages of {a.size} B, maxOffsetsPerTrigger={a.batch or 'default'}, "
          f"minPartitions={a.partitions or 'default'}, {dict(a.option)}, {a.master}, JVM options "
          f"{a.java_options or 'none'}, "
          f"load {result['load']:.2f} -> {os.getloadavg()[0]:.2f}")
    for mode, rounds in result.get("source", {}).items():
        for i, r in enumerate(rounds):
            print_read(f"source, {mode}, round {i + 1}", r)
    if "bare" in result:
        print_versus_bare(result["bare"])
    if "batches" in result:
        print_batches(result["batches"]["queries"])
    for label, r in result.get("scaling", {}).items():
        print_read(f"scaling, {label}", r)
    if "pipeline" in result:
        print_read("pipeline", result["pipeline"])
    if "live" in result:
        live = result["live"]
        print(f"live       : {live['published']} events at {live['publish_rate']:.0f}/s: lag every 10 s "
              f"{live['lag_samples'][::10]}, max {live['max_lag']}, caught up {live['catch_up_s']:.1f} s after "
              f"publishing ended ({live['left_in_nsqd']} left)")
    if "sink" in result:
        sink = result["sink"]
        print(f"sink ->    : {sink['rows']:>8} rows in {sink['seconds']:6.1f} s = {sink['rows_per_s']:9.0f} rows/s "
              f"({sink['in_nsqd']} in the topic)")


if __name__ == "__main__":
    main()
