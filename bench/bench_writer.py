#!/usr/bin/env python3
"""Publish load generator for nsqd, modelled on nsq's ``bench/bench_writer``.

N worker processes each open one TCP connection, send ``IDENTIFY``, wait for a common start signal and then send
the same pre-built ``MPUB`` frame over and over for ``--runfor``, checking the ``OK`` of every MPUB. With
``--pipeline 1`` (the default, like the Go tool) each worker waits for the ``OK`` before sending the next MPUB.

Human-readable lines go to stderr (like Go's ``log``); ``--json`` prints one JSON summary object on stdout.
Standard library only, so it runs anywhere Python 3.10+ does.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import socket
import struct
import sys
import time
from array import array
from typing import Any

from benchlib import (
    HEARTBEAT,
    II,
    make_log,
    parse_addr,
    parse_deadline,
    parse_duration,
    parse_name,
    percentiles,
    read_frame,
    start_and_collect,
    wait_until_ready,
)

MAGIC_V2 = b"  V2"
FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2

log = make_log("bench_writer")

def build_mpub(topic: str, size: int, batch_size: int) -> bytes:
    """Build one complete ``MPUB`` command: ``MPUB <topic>\\n[len][count]([size][body])*``."""
    body = bytes(size)  # zero bytes, like the Go tool
    part = struct.pack(">i", size) + body
    payload = struct.pack(">i", batch_size) + part * batch_size
    return b"MPUB " + topic.encode() + b"\n" + struct.pack(">i", len(payload)) + payload


def build_identify(data: dict[str, Any]) -> bytes:
    """Build an ``IDENTIFY`` command with a JSON body."""
    body = json.dumps(data).encode()
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


def pub_worker(idx: int, cfg: dict[str, Any], ready_q: Any, go: Any, abort: Any, result_q: Any) -> None:
    """One connection: handshake, wait for the start signal, publish for ``runfor``, report via ``result_q``."""
    res: dict[str, Any] = {"idx": idx, "msgs": 0, "mpubs": 0, "errors": 0, "error_samples": [], "lat_ns": b""}
    try:
        sock = socket.create_connection(cfg["addr"], timeout=cfg["timeout"])
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(MAGIC_V2)
        ident = {
            "client_id": "writer",
            "hostname": "writer",
            "user_agent": "bench_writer.py/1.0",
            "feature_negotiation": False,
        }
        sock.sendall(build_identify(ident))
        rbuf = bytearray()
        ftype, data = read_frame(sock, rbuf)
        if ftype != FRAME_RESPONSE:
            raise RuntimeError(f"IDENTIFY failed: {data[:200]!r}")
    except Exception as exc:  # reported to the parent
        ready_q.put((idx, f"{type(exc).__name__}: {exc}", None))
        return
    ready_q.put((idx, None, None))
    if not go.wait(cfg["go_timeout"]) or abort.value:
        sock.close()
        return

    frame = build_mpub(cfg["topic"], cfg["size"], cfg["batch_size"])
    batch, pipeline, runfor = cfg["batch_size"], cfg["pipeline"], cfg["runfor"]
    outstanding: collections.deque[int] = collections.deque()
    lat, sent = array("q"), array("q")  # per answered MPUB: latency, send time since start (ns)
    ok = errors = 0
    samples: list[str] = []
    clock = time.perf_counter_ns
    start_ns = clock()
    end_ns = start_ns + int(runfor * 1e9)
    stopping = False
    try:
        while True:
            if not stopping:
                if clock() >= end_ns:
                    stopping = True
                else:
                    while len(outstanding) < pipeline:
                        outstanding.append(clock())
                        sock.sendall(frame)
            if not outstanding:
                break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                errors += len(outstanding)
                samples.append(f"timeout: no reply within {cfg['timeout']}s ({len(outstanding)} MPUB outstanding)")
                break
            if not chunk:
                errors += len(outstanding)
                samples.append(f"connection closed by server with {len(outstanding)} MPUB outstanding")
                break
            now = clock()
            rbuf += chunk
            off, have, fatal = 0, len(rbuf), False
            while have - off >= 8:
                size, ftype = II.unpack_from(rbuf, off)
                end = off + 4 + size
                if size < 4 or end > have:
                    if size < 4:
                        raise RuntimeError(f"bad frame size {size} at offset {off}")
                    break
                data = bytes(rbuf[off + 8 : end])
                off = end
                if ftype == FRAME_RESPONSE and data == HEARTBEAT:
                    sock.sendall(b"NOP\n")
                    continue
                if not outstanding:
                    errors += 1
                    samples.append(f"unexpected frame type={ftype} data={data[:100]!r}")
                    continue
                t0 = outstanding.popleft()
                lat.append(now - t0)
                sent.append(t0 - start_ns)
                if ftype == FRAME_RESPONSE and data == b"OK":
                    ok += 1
                else:
                    errors += 1
                    if len(samples) < 10:
                        samples.append(f"frame type={ftype} data={data[:200]!r}")
                    fatal = ftype == FRAME_ERROR  # every MPUB error is fatal in nsqd: it closes the socket
            del rbuf[:off]
            if fatal:
                errors += len(outstanding)
                break
            if not stopping and clock() >= end_ns:
                stopping = True
    except OSError as exc:
        errors += max(1, len(outstanding))
        samples.append(f"{type(exc).__name__}: {exc}")
    finally:
        sock.close()
    res["cpu_s"] = time.process_time()
    res.update(
        msgs=ok * batch,
        mpubs=ok,
        errors=errors,
        error_samples=samples[:10],
        lat_ns=lat.tobytes(),
        sent_ns=sent.tobytes(),
    )
    result_q.put(res)


def summarize(results: list[dict[str, Any]], duration: float, cfg: dict[str, Any]) -> dict[str, Any]:
    """Aggregate per-process results into one summary dict."""
    msgs = sum(r["msgs"] for r in results)
    lat = array("q")
    for r in results:
        lat.frombytes(r["lat_ns"])
    pct = {k: v / 1e6 for k, v in percentiles(list(lat), (0.5, 0.9, 0.99)).items()}
    slowest = []  # (latency ms, seconds after start, worker): shows whether stalls are at startup or periodic
    for r in results:
        rl, rs = array("q"), array("q")
        rl.frombytes(r["lat_ns"])
        rs.frombytes(r["sent_ns"])
        slowest.extend((rl[i] / 1e6, rs[i] / 1e9, r["idx"]) for i in sorted(range(len(rl)), key=rl.__getitem__)[-5:])
    slowest.sort(reverse=True)
    return {
        "tool": "bench_writer",
        "procs": cfg["procs"],
        "size": cfg["size"],
        "batch_size": cfg["batch_size"],
        "pipeline": cfg["pipeline"],
        "duration_s": duration,
        "msgs": msgs,
        "mpubs": sum(r["mpubs"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "error_samples": [s for r in results for s in r["error_samples"]][:20],
        "msgs_per_s": msgs / duration if duration > 0 else 0.0,
        "mb_per_s": msgs * cfg["size"] / duration / 1024 / 1024 if duration > 0 else 0.0,
        "us_per_op": duration * 1e6 / msgs if msgs else 0.0,
        "mpub_latency_ms": pct,
        "slowest_mpubs": [{"ms": round(ms, 3), "at_s": round(at, 3), "worker": w} for ms, at, w in slowest[:5]],
        "workers_reported": len(results),
        "client_cpu_s": sum(r["cpu_s"] for r in results),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line flags (names follow the Go tool)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nsqd-tcp-address", type=parse_addr, default=("127.0.0.1", 4150), help="host:port of nsqd")
    p.add_argument("--topic", type=parse_name, default="sub_bench", help="topic to publish to")
    p.add_argument("--size", type=int, default=200, help="size of each message in bytes")
    p.add_argument("--batch-size", type=int, default=200, help="messages per MPUB")
    p.add_argument("--runfor", type=parse_duration, default=10.0, help="how long to publish (Go duration: 10s, 1m)")
    p.add_argument(
        "--procs",
        "--connections",
        dest="procs",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="worker processes, one connection each (default: half the CPUs)",
    )
    p.add_argument("--pipeline", type=int, default=1, help="max MPUBs in flight per connection (1 = like Go)")
    p.add_argument(
        "--deadline",
        type=parse_deadline,
        default=None,
        help="start at this time: 'YYYY-MM-DD HH:MM:SS' (UTC, like the Go tool) or unix seconds",
    )
    p.add_argument("--timeout", type=parse_duration, default=10.0, help="connect / reply timeout")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    a = p.parse_args(argv)
    if a.size < 1 or a.batch_size < 1 or a.procs < 1 or a.pipeline < 1:
        p.error("--size, --batch-size, --procs and --pipeline must be >= 1")
    if 4 + a.batch_size * (4 + a.size) > 5 * 1024 * 1024:
        log("warning: MPUB body exceeds nsqd's default --max-body-size (5242880)")
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the results."""
    a = parse_args(argv)
    cfg = {
        "addr": a.nsqd_tcp_address,
        "topic": a.topic,
        "size": a.size,
        "batch_size": a.batch_size,
        "runfor": a.runfor,
        "procs": a.procs,
        "pipeline": a.pipeline,
        "timeout": a.timeout,
        "go_timeout": 30.0 + max(0.0, (a.deadline or 0) - time.time()),
    }
    ready_q, result_q = mp.Queue(), mp.Queue()
    go, abort = mp.Event(), mp.Value("b", 0)
    procs = [
        mp.Process(target=pub_worker, args=(i, cfg, ready_q, go, abort, result_q), daemon=True) for i in range(a.procs)
    ]
    if not wait_until_ready(procs, ready_q, abort, go, a.timeout + 20, log, "bench_writer", a.json)[0]:
        return 1

    results, start, end = start_and_collect(procs, go, result_q, a.deadline, a.runfor + a.timeout + 30, log,
                                            time.perf_counter)
    s = summarize(results, end - start, cfg)
    log(
        f"duration: {s['duration_s']:.3f}s - {s['mb_per_s']:.3f}mb/s - {s['msgs_per_s']:.3f}ops/s"
        f" - {s['us_per_op']:.3f}us/op"
    )
    lp = s["mpub_latency_ms"]
    log(
        f"mpub latency: p50={lp['p50']:.3f}ms p90={lp['p90']:.3f}ms p99={lp['p99']:.3f}ms max={lp['max']:.3f}ms"
        f" ({s['mpubs']} MPUB x {a.batch_size} msgs, {a.procs} conns, pipeline {a.pipeline}, errors={s['errors']})"
    )
    if s["slowest_mpubs"]:
        log("slowest MPUBs: " + ", ".join(f"{x['ms']:.1f}ms@+{x['at_s']:.2f}s" for x in s["slowest_mpubs"]))
    for e in s["error_samples"]:
        log(f"error: {e}")
    if a.json:
        print(json.dumps(s), flush=True)
    return 1 if s["errors"] or len(results) != a.procs else 0


if __name__ == "__main__":
    sys.exit(main())
