#!/usr/bin/env python3
"""Rows/s through the Spark "nsq" connector on local[2]: the source into Spark's no-op sink, and the sink.

Starts an nsqd (the venv's, on free loopback ports, temp data dir) unless --nsqd-tcp-address/--nsqd-http-address
point at one. Source: publish --messages bodies of --size bytes, then run a readStream with
trigger(availableNow=True) into format("noop") and time it (start to end, and the sum of the batches' own
durations). Sink: spark.range(--messages) as --size-byte strings, df.write.format("nsq"), then check the topic
depth. Prints a table; --json prints the numbers.

    .venv/bin/python bench/bench_spark.py --messages 200000 --size 100
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from nsqd_py.client import Producer, nsqd_stats
from nsqd_py.spark import register


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nsqd(workdir: Path) -> tuple[subprocess.Popen, str, str]:
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


def bench_source(spark: SparkSession, a: argparse.Namespace, tcp: str, http: str) -> dict:
    topic = f"spark_bench_src_{os.getpid()}"
    body = b"x" * a.size
    with Producer(tcp) as producer:
        for i in range(0, a.messages, 1000):
            producer.mpub(topic, [body] * min(1000, a.messages - i))
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        reader = (spark.readStream.format("nsq").option("topic", topic).option("channel", "bench")
                  .option("nsqd_tcp_addresses", tcp).options(**dict(a.option)))
        if a.batch:
            reader = reader.option("max_messages_per_batch", str(a.batch))
        if a.partitions:
            reader = reader.option("num_partitions", str(a.partitions))
        query = (reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        progress = query.recentProgress
    if a.verbose:
        for p in progress:
            print(p.batchId, p.numInputRows, p.durationMs, file=sys.stderr)
    rows = sum(p.numInputRows for p in progress)
    batches_ms = sum(p.durationMs.get("triggerExecution", 0) for p in progress if "addBatch" in p.durationMs)
    non_empty = [p for p in progress if p.numInputRows]
    left = depth(http, topic)
    return {"rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed, "batches": len(non_empty),
            "rows_per_s_in_batches": rows / (batches_ms / 1000) if batches_ms else 0.0, "left_in_nsqd": left}


def bench_sink(spark: SparkSession, a: argparse.Namespace, tcp: str, http: str) -> dict:
    topic = f"spark_bench_sink_{os.getpid()}"
    df = (spark.range(a.messages, numPartitions=2)
          .select(F.rpad(F.col("id").cast("string"), a.size, "x").alias("value")).cache())
    df.count()  # generate the rows outside the timing
    started = time.perf_counter()
    df.write.format("nsq").mode("append").option("topic", topic).option("nsqd_tcp_addresses", tcp).save()
    elapsed = time.perf_counter() - started
    df.unpersist()
    published = depth(http, topic)
    return {"rows": a.messages, "seconds": elapsed, "rows_per_s": a.messages / elapsed, "in_nsqd": published}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--size", type=int, default=100, help="body bytes")
    p.add_argument("--batch", type=int, help="max_messages_per_batch (default: the source's)")
    p.add_argument("--partitions", type=int, help="num_partitions (default: the source's); 2 write partitions")
    p.add_argument("--option", type=lambda kv: tuple(kv.split("=", 1)), action="append", default=[],
                   metavar="KEY=VALUE", help="another source option (repeatable)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--nsqd-tcp-address")
    p.add_argument("--nsqd-http-address")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", action="store_true", help="print every batch's phase durations (stderr)")
    a = p.parse_args()

    nsqd = None
    workdir = tempfile.TemporaryDirectory()
    if a.nsqd_tcp_address and a.nsqd_http_address:
        tcp, http = a.nsqd_tcp_address, a.nsqd_http_address
    else:
        nsqd, tcp, http = start_nsqd(Path(workdir.name))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(a.master).appName("bench_spark").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        spark.range(10).count()  # JVM and Python workers warm
        result = {"messages": a.messages, "size": a.size, "batch": a.batch, "master": a.master,
                  "source": bench_source(spark, a, tcp, http), "sink": bench_sink(spark, a, tcp, http)}
    finally:
        spark.stop()
        if nsqd is not None:
            nsqd.terminate()
            nsqd.wait(30)
        workdir.cleanup()
    if a.json:
        print(json.dumps(result, indent=2))
        return
    src, sink = result["source"], result["sink"]
    print(f"{a.messages} messages of {a.size} B, max_messages_per_batch={a.batch or 'default'}, "
          f"num_partitions={a.partitions or 'default'}, {dict(a.option)}, {a.master}")
    print(f"source -> noop : {src['rows']:>8} rows in {src['seconds']:6.1f} s = {src['rows_per_s']:9.0f} rows/s "
          f"({src['batches']} batches; {src['rows_per_s_in_batches']:.0f} rows/s inside batches; "
          f"{src['left_in_nsqd']} left in nsqd)")
    print(f"sink  -> nsqd  : {sink['rows']:>8} rows in {sink['seconds']:6.1f} s = {sink['rows_per_s']:9.0f} rows/s "
          f"({sink['in_nsqd']} in the topic)")


if __name__ == "__main__":
    main()
