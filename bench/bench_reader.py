#!/usr/bin/env python3
"""Consume load generator for nsqd, modelled on nsq's ``bench/bench_reader``.

N worker processes each open one TCP connection, ``IDENTIFY``, ``SUB`` to the same topic/channel, wait for a common
start signal, send ``RDY`` and then ``FIN`` every message they receive (one ``sendall`` of FINs per received
chunk). End-to-end latency is receive wall-clock time minus the publish timestamp nsqd puts in every message frame.

A run ends after ``--runfor``, after ``--idle-timeout`` without data once something arrived, or when all workers
together received ``--expect`` messages. Human-readable lines go to stderr; ``--json`` prints a JSON summary on
stdout. Standard library only (Python 3.10+).
"""

from __future__ import annotations

import argparse
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
MSG_HEADER = 26  # timestamp int64 + attempts uint16 + 16-byte id

_I = struct.Struct(">i")
_QH = struct.Struct(">qH")


log = make_log("bench_reader")

def command(name: str, *params: str, body: bytes | None = None) -> bytes:
    """Encode one protocol V2 command, with an optional length-prefixed body."""
    line = " ".join((name, *params)).encode() + b"\n"
    return line if body is None else line + _I.pack(len(body)) + body


def handshake(cfg: dict[str, Any]) -> tuple[socket.socket, bytearray, dict[str, Any]]:
    """Connect, IDENTIFY and SUB; return the socket, leftover bytes and the IDENTIFY reply."""
    sock = socket.create_connection(cfg["addr"], timeout=cfg["timeout"])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if cfg["rcvbuf"]:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, cfg["rcvbuf"])
    ident: dict[str, Any] = {
        "client_id": "reader",
        "hostname": "reader",
        "user_agent": "bench_reader.py/1.0",
        "feature_negotiation": True,
        "msg_timeout": cfg["msg_timeout_ms"],
    }
    for key in ("output_buffer_size", "output_buffer_timeout", "heartbeat_interval"):
        if cfg[key] is not None:
            ident[key] = cfg[key]
    buf = bytearray()
    sock.sendall(MAGIC_V2 + command("IDENTIFY", body=json.dumps(ident).encode()))
    ftype, data = read_frame(sock, buf)
    if ftype != FRAME_RESPONSE:
        raise RuntimeError(f"IDENTIFY failed: {data[:200]!r}")
    reply: dict[str, Any] = {"raw": data.decode(errors="replace")}
    if data != b"OK":
        try:
            reply = json.loads(data)
        except ValueError as exc:
            raise RuntimeError(f"IDENTIFY reply is neither OK nor JSON: {data[:200]!r}") from exc
    sock.sendall(command("SUB", cfg["topic"], cfg["channel"]))
    while True:
        ftype, data = read_frame(sock, buf)
        if ftype == FRAME_RESPONSE and data == HEARTBEAT:
            sock.sendall(b"NOP\n")
            continue
        if ftype != FRAME_RESPONSE or data != b"OK":
            raise RuntimeError(f"SUB failed: type={ftype} data={data[:200]!r}")
        return sock, buf, reply


def read_expect_file(path: str) -> int:
    """Read the expected message count written by a coordinator (0 while incomplete or unreadable)."""
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def sub_worker(idx: int, cfg: dict[str, Any], ready_q: Any, go: Any, abort: Any, counts: Any, result_q: Any) -> None:
    """One connection: handshake, wait for the start signal, consume and FIN, report via ``result_q``."""
    try:
        sock, pending, reply = handshake(cfg)
    except Exception as exc:  # reported to the parent
        ready_q.put((idx, f"{type(exc).__name__}: {exc}", None))
        return
    ready_q.put((idx, None, reply))
    if not go.wait(cfg["go_timeout"]) or abort.value:
        sock.close()
        return

    expect_total, idle_timeout, runfor = cfg["expect"], cfg["idle_timeout"], cfg["runfor"]
    expect_file = cfg["expect_file"]
    exp_frame_size = cfg["size"] + MSG_HEADER + 4 if cfg["size"] > 0 else -1  # the frame size field
    max_samples = cfg["max_samples"]
    buf = bytearray(max(cfg["bufsize"], 2 * len(pending) + 65536))
    buf[: len(pending)] = pending
    mv = memoryview(buf)
    have = len(pending)
    lat = array("q")
    lat_append = lat.append
    stride, skip = 1, 0
    msgs = nbytes = redelivered = bad_size = heartbeats = 0
    errors: list[str] = []
    error_count = 0
    first_recv = last_recv = max_gap = max_gap_at = 0.0  # longest pause between two reads, and when it began
    stop_reason = "runfor"
    mono = time.monotonic
    t_end = mono() + runfor
    next_check = 0.0
    send_timeout, poll = cfg["timeout"], 0.1
    sock.settimeout(send_timeout)
    sock.sendall(command("RDY", str(cfg["rdy"])))
    sock.settimeout(poll)
    try:
        while True:
            try:
                n = sock.recv_into(mv[have:])
            except TimeoutError:
                n = -1
            if n == 0:
                stop_reason = "closed"
                error_count += 1
                errors.append(f"connection closed by server after {msgs} messages")
                break
            if n > 0:
                have += n
                t = time.time()
                if first_recv:
                    if t - last_recv > max_gap:
                        max_gap, max_gap_at = t - last_recv, last_recv
                else:
                    first_recv = t
                last_recv = t
                now_ns = time.time_ns()
                ids: list[memoryview] = []
                ids_append = ids.append
                extra = b""
                off = 0
                while have - off >= 8:
                    size, ftype = II.unpack_from(buf, off)
                    end = off + 4 + size
                    if size < 4:
                        raise OSError(f"corrupt stream: frame size {size} after {msgs} messages")
                    if end > have:
                        break
                    if ftype == FRAME_MESSAGE:
                        ts, attempts = _QH.unpack_from(buf, off + 8)
                        ids_append(mv[off + 18 : off + 34])
                        nbytes += size - 30
                        if attempts != 1:
                            redelivered += 1
                        if size != exp_frame_size and exp_frame_size > 0:
                            bad_size += 1
                        skip += 1
                        if skip >= stride:
                            skip = 0
                            lat_append(now_ns - ts)
                    elif ftype == FRAME_RESPONSE:
                        data = bytes(buf[off + 8 : end])
                        if data == HEARTBEAT:
                            heartbeats += 1
                            extra += b"NOP\n"
                        elif len(errors) < 20:
                            errors.append(f"unexpected response {data[:200]!r}")
                    else:
                        error_count += 1
                        if len(errors) < 20:
                            errors.append(f"error frame type={ftype}: {bytes(buf[off + 8 : end])[:200]!r}")
                    off = end
                if ids or extra:
                    msgs += len(ids)
                    out = (b"FIN " + b"\nFIN ".join(ids) + b"\n" if ids else b"") + extra
                    for v in ids:
                        v.release()  # the buffer is compacted/grown below
                    del ids, ids_append
                    sock.settimeout(send_timeout)
                    sock.sendall(out)
                    sock.settimeout(poll)
                rem = have - off
                if off and rem:
                    buf[:rem] = buf[off:have]
                have = rem
                if rem >= 8:
                    need = _I.unpack_from(buf, 0)[0] + 4
                    if need > len(buf):  # a frame bigger than the buffer: grow it
                        mv.release()
                        buf = buf + bytearray(need - len(buf) + 65536)
                        mv = memoryview(buf)
                if len(lat) >= max_samples:
                    lat = array("q", lat[::2])
                    lat_append = lat.append
                    stride *= 2
            now_m = mono()
            if now_m >= t_end:
                break
            if now_m >= next_check:
                next_check = now_m + 0.05
                counts[idx] = msgs
                if not expect_total and expect_file and os.path.exists(expect_file):
                    expect_total = read_expect_file(expect_file)
                if expect_total and sum(counts[:]) >= expect_total:
                    stop_reason = "expect"
                    break
                if idle_timeout and first_recv and time.time() - last_recv >= idle_timeout:
                    stop_reason = "idle"
                    break
                if abort.value:
                    stop_reason = "abort"
                    break
    except OSError as exc:
        stop_reason = "error"
        error_count += 1
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        sock.close()
    counts[idx] = msgs
    result_q.put(
        {
            "cpu_s": time.process_time(),
            "idx": idx,
            "msgs": msgs,
            "bytes": nbytes,
            "redelivered": redelivered,
            "bad_size": bad_size,
            "heartbeats": heartbeats,
            "errors": error_count,
            "error_samples": errors[:20],
            "first_recv": first_recv,
            "max_gap": max_gap,
            "max_gap_at": max_gap_at,
            "last_recv": last_recv,
            "stop": stop_reason,
            "stride": stride,
            "lat_ns": lat.tobytes(),
        }
    )


def summarize(results: list[dict[str, Any]], start_wall: float, end_wall: float, cfg: dict[str, Any]) -> dict[str, Any]:
    """Aggregate per-process results into one summary dict.

    The duration runs from the start signal to the end of the run, except when the run ended because it went idle
    or reached ``--expect``: then it ends at the last received message, so the idle tail does not dilute the rate.
    """
    msgs = sum(r["msgs"] for r in results)
    stops = sorted({r["stop"] for r in results})
    last = max((r["last_recv"] for r in results), default=0.0)
    end = last if last and set(stops) <= {"idle", "expect"} else end_wall
    duration = max(end - start_wall, 1e-9)
    lat = array("q")
    for r in results:
        lat.frombytes(r["lat_ns"])
    pct = {k: v / 1e6 for k, v in percentiles(list(lat), (0.5, 0.9, 0.99)).items()}
    firsts = [r["first_recv"] for r in results if r["first_recv"]]
    return {
        "tool": "bench_reader",
        "procs": cfg["procs"],
        "rdy": cfg["rdy"],
        "size": cfg["size"],
        "duration_s": duration,
        "wall_s": end_wall - start_wall,
        "first_msg_after_s": (min(firsts) - start_wall) if firsts else None,
        "max_gaps": [
            {"worker": r["idx"], "gap_s": round(r["max_gap"], 4), "at_s": round(r["max_gap_at"] - start_wall, 3)}
            for r in sorted(results, key=lambda r: r["idx"])
            if r["max_gap"]
        ],
        "msgs": msgs,
        "per_conn_msgs": [r["msgs"] for r in sorted(results, key=lambda r: r["idx"])],
        "bytes": sum(r["bytes"] for r in results),
        "msgs_per_s": msgs / duration,
        "mb_per_s": sum(r["bytes"] for r in results) / duration / 1024 / 1024,
        "us_per_op": duration * 1e6 / msgs if msgs else 0.0,
        "e2e_latency_ms": pct,
        "latency_samples": len(lat),
        "max_stride": max((r["stride"] for r in results), default=1),
        "redelivered": sum(r["redelivered"] for r in results),
        "bad_size": sum(r["bad_size"] for r in results),
        "heartbeats": sum(r["heartbeats"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "error_samples": [e for r in results for e in r["error_samples"]][:20],
        "stop": stops,
        "workers_reported": len(results),
        "client_cpu_s": sum(r["cpu_s"] for r in results),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line flags (names follow the Go tool)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nsqd-tcp-address", type=parse_addr, default=("127.0.0.1", 4150), help="host:port of nsqd")
    p.add_argument("--topic", type=parse_name, default="sub_bench", help="topic to subscribe to")
    p.add_argument(
        "--channel", type=parse_name, default="ch", help="channel to subscribe to (shared by all connections)"
    )
    p.add_argument("--rdy", type=int, default=2500, help="RDY count per connection (nsqd caps it at --max-rdy-count)")
    p.add_argument(
        "--size",
        type=int,
        default=200,
        help="expected message size: used for the size check (0 = do not check); MB/s uses real sizes",
    )
    p.add_argument("--runfor", type=parse_duration, default=10.0, help="max run time (Go duration: 10s, 1m)")
    p.add_argument(
        "--idle-timeout",
        type=parse_duration,
        default=0.0,
        help="stop after this long without data once something was received (0 = off)",
    )
    p.add_argument("--expect", type=int, default=0, help="stop once all connections together received N messages")
    p.add_argument(
        "--expect-file",
        default=None,
        help="like --expect, with N read from this file once it exists (for a concurrent writer)",
    )
    p.add_argument(
        "--procs",
        "--connections",
        dest="procs",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="worker processes, one connection each (default: half the CPUs)",
    )
    p.add_argument(
        "--deadline",
        type=parse_deadline,
        default=None,
        help="start at this time: 'YYYY-MM-DD HH:MM:SS' (UTC, like the Go tool) or unix seconds",
    )
    p.add_argument("--msg-timeout", type=parse_duration, default=60.0, help="IDENTIFY msg_timeout")
    p.add_argument("--output-buffer-size", type=int, default=None, help="IDENTIFY output_buffer_size (bytes)")
    p.add_argument("--output-buffer-timeout", type=int, default=None, help="IDENTIFY output_buffer_timeout (ms)")
    p.add_argument("--heartbeat-interval", type=int, default=None, help="IDENTIFY heartbeat_interval (ms)")
    p.add_argument("--recv-buffer", type=int, default=4 << 20, help="user-space receive buffer per connection")
    p.add_argument("--so-rcvbuf", type=int, default=0, help="SO_RCVBUF to request (0 = kernel default)")
    p.add_argument(
        "--max-samples",
        type=int,
        default=1_000_000,
        help="latency samples kept per connection; beyond that every 2nd, 4th, ... message is sampled",
    )
    p.add_argument("--timeout", type=parse_duration, default=10.0, help="connect / handshake / send timeout")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    a = p.parse_args(argv)
    if a.procs < 1 or a.rdy < 0 or a.max_samples < 2:
        p.error("--procs must be >= 1, --rdy >= 0, --max-samples >= 2")
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the results."""
    a = parse_args(argv)
    cfg = {
        "addr": a.nsqd_tcp_address,
        "topic": a.topic,
        "channel": a.channel,
        "rdy": a.rdy,
        "size": a.size,
        "runfor": a.runfor,
        "idle_timeout": a.idle_timeout,
        "expect": a.expect,
        "expect_file": a.expect_file,
        "procs": a.procs,
        "msg_timeout_ms": int(a.msg_timeout * 1000),
        "output_buffer_size": a.output_buffer_size,
        "output_buffer_timeout": a.output_buffer_timeout,
        "heartbeat_interval": a.heartbeat_interval,
        "bufsize": a.recv_buffer,
        "rcvbuf": a.so_rcvbuf,
        "max_samples": a.max_samples,
        "timeout": a.timeout,
        "go_timeout": 30.0 + max(0.0, (a.deadline or 0) - time.time()),
    }
    ready_q, result_q = mp.Queue(), mp.Queue()
    go, abort = mp.Event(), mp.Value("b", 0)
    counts = mp.RawArray("q", a.procs)
    procs = [
        mp.Process(target=sub_worker, args=(i, cfg, ready_q, go, abort, counts, result_q), daemon=True)
        for i in range(a.procs)
    ]
    ready, reply = wait_until_ready(procs, ready_q, abort, go, a.timeout + 20, log, "bench_reader", a.json)
    if not ready:
        return 1
    if reply and "max_rdy_count" in reply and a.rdy > reply["max_rdy_count"]:
        log(f"warning: --rdy {a.rdy} > server max_rdy_count {reply['max_rdy_count']} (nsqd will reject RDY)")

    results, start, end = start_and_collect(procs, go, result_q, a.deadline, a.runfor + a.timeout + 30, log,
                                            time.time)
    s = summarize(results, start, end, cfg)
    s["identify_reply"] = reply
    log(
        f"duration: {s['duration_s']:.3f}s - {s['mb_per_s']:.3f}mb/s - {s['msgs_per_s']:.3f}ops/s"
        f" - {s['us_per_op']:.3f}us/op"
    )
    lp = s["e2e_latency_ms"]
    sampled = "" if s["max_stride"] == 1 else f", sampled 1/{s['max_stride']}"
    log(
        f"e2e latency: p50={lp['p50']:.3f}ms p90={lp['p90']:.3f}ms p99={lp['p99']:.3f}ms max={lp['max']:.3f}ms"
        f" ({s['latency_samples']} samples{sampled})"
    )
    log(
        f"totals: {s['msgs']} msgs {s['bytes']} bytes over {a.procs} conns {s['per_conn_msgs']},"
        f" stop={','.join(s['stop'])},"
        f" redelivered={s['redelivered']} bad_size={s['bad_size']} heartbeats={s['heartbeats']} errors={s['errors']}"
    )
    if s["max_gaps"]:
        log(
            "longest pause between reads: "
            + ", ".join(f"conn{g['worker']} {g['gap_s'] * 1000:.1f}ms@+{g['at_s']:.2f}s" for g in s["max_gaps"])
        )
    for e in s["error_samples"]:
        log(f"error: {e}")
    if a.json:
        print(json.dumps(s), flush=True)
    bad = s["errors"] or s["bad_size"] or len(results) != a.procs or (a.expect and s["msgs"] < a.expect)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
