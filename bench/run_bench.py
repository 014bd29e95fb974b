#!/usr/bin/env python3
"""Start an nsqd, drive it with bench_writer.py / bench_reader.py and print a small report.

The server (``.venv/bin/nsqd`` by default, or any command given with ``--nsqd-cmd``, e.g. a Go ``nsqd`` binary) gets
free loopback ports and a temporary ``--data-path``. Modes:

* ``pub-then-sub`` (default): publish for ``--runfor``, then consume everything that was published.
* ``pubsub``: publish and consume at the same time (the reader stops once it has everything the writer published).

While the phases run, the server's RSS (``VmRSS`` from ``/proc/<pid>/status``, summed over its process tree) and CPU
time are sampled. The run also checks a few things a benchmark can see for free: every MPUB got ``OK``, ``/stats``
counts match, everything published was consumed exactly once, the server shuts down cleanly on SIGTERM, and its log
has no ERROR lines. Exit status 1 when any of that went wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from benchlib import parse_duration

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_NSQD = REPO / ".venv" / "bin" / "nsqd"
CLK_TCK = os.sysconf("SC_CLK_TCK")
_LOG_ERROR_RE = re.compile(r"\b(ERROR|FATAL|PANIC|CRITICAL)\b|^panic:|Traceback \(most recent call last\)")
_LOG_WARN_RE = re.compile(r"\bWARN(ING)?\b")


def fmt_duration(sec: float) -> str:
    """Format seconds for command lines of the load generators (``5s``, ``1.5s``)."""
    return f"{sec:g}s"


def free_port() -> int:
    """Ask the kernel for a free loopback TCP port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(msg: str) -> None:
    """Progress line on stderr."""
    sys.stderr.write(f"[run_bench] {time.strftime('%H:%M:%S')} {msg}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------------------------
# /proc sampling


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (via /proc/<pid>/task/*/children, else a /proc scan)."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    found_file = False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found_file = True
                kids.extend(int(x) for x in f.read().split())
        except OSError:
            continue
    if found_file:
        return kids
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rpartition(")")[2].split()[1]) == pid:
                        kids.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return kids


def proc_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    out, todo = [], [pid]
    while todo and len(out) < 1000:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def rss_and_cpu(pids: list[int]) -> tuple[int, float]:
    """Total VmRSS (bytes) and user+system CPU seconds of ``pids``."""
    rss, ticks = 0, 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) * 1024
                        break
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
                ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
        except (OSError, ValueError, IndexError):
            continue
    return rss, ticks / CLK_TCK


class Sampler(threading.Thread):
    """Samples RSS/CPU of the server's process tree every ``interval`` seconds, tagging samples with a phase."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.phase = "startup"
        self.samples: list[tuple[float, str, int, float]] = []
        self._stop_evt = threading.Event()
        self._pids: list[int] = [pid]
        self._next_tree = 0.0

    def sample(self) -> None:
        """Take one sample now."""
        now = time.monotonic()
        if now >= self._next_tree:  # the tree rarely changes; rescan once a second
            self._pids, self._next_tree = proc_tree(self.pid), now + 1.0
        rss, cpu = rss_and_cpu(self._pids)
        if rss:
            self.samples.append((now, self.phase, rss, cpu))

    def set_phase(self, phase: str) -> None:
        """Switch the phase tag, with a sample on each side of the boundary."""
        self.sample()
        self.phase = phase
        self.sample()

    def phase_at(self, phase: str, wall_time: float) -> threading.Timer:
        """Switch to ``phase`` at unix time ``wall_time`` (when the load generators start); cancel if they fail."""
        self.set_phase("starting")
        timer = threading.Timer(max(0.0, wall_time - time.time()), self.set_phase, (phase,))
        timer.daemon = True
        timer.start()
        return timer

    def run(self) -> None:
        while not self._stop_evt.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        """Stop sampling (takes a last sample)."""
        self._stop_evt.set()
        self.join(2)
        self.sample()

    def phase_stats(self, phase: str) -> dict[str, Any]:
        """Peak and last RSS plus CPU use (cores) for one phase."""
        s = [x for x in self.samples if x[1] == phase]
        if not s:
            return {}
        wall = s[-1][0] - s[0][0]
        cpu = s[-1][3] - s[0][3]
        return {
            "rss_peak": max(x[2] for x in s),
            "rss_end": s[-1][2],
            "rss_start": s[0][2],
            "cpu_s": cpu,
            "cpu_cores": cpu / wall if wall > 0 else 0.0,
            "wall_s": wall,
        }

    def peak(self) -> int:
        """Peak RSS over the whole run."""
        return max((x[2] for x in self.samples), default=0)


# ---------------------------------------------------------------------------------------------------------------
# server control


class Server:
    """An nsqd child process on free loopback ports with a temporary data directory."""

    def __init__(self, cmd: list[str], workdir: Path, mem_queue_size: int, extra: list[str]) -> None:
        self.tcp_port, self.http_port = free_port(), free_port()
        while self.http_port == self.tcp_port:
            self.http_port = free_port()
        self.data = workdir / "data"
        self.data.mkdir()
        self.log_path = workdir / "nsqd.log"
        self.argv = [
            *cmd,
            f"--tcp-address=127.0.0.1:{self.tcp_port}",
            f"--http-address=127.0.0.1:{self.http_port}",
            f"--data-path={self.data}",
            f"--mem-queue-size={mem_queue_size}",
            *extra,
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.http_ok = False

    @property
    def tcp_addr(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    def start(self, timeout: float) -> None:
        """Start and wait until TCP accepts connections (and HTTP /ping answers, if it does)."""
        say("starting: " + shlex.join(self.argv))
        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen(
                self.argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        tcp_ok = False
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nsqd exited during startup with code {self.proc.returncode}\n{self.log_tail()}")
            if not tcp_ok:
                try:
                    with socket.create_connection(("127.0.0.1", self.tcp_port), timeout=0.5) as s:
                        s.sendall(b"  V2NOP\n")  # a bare connect+close makes nsqd log an ERROR (no magic)
                    tcp_ok = True
                except OSError:
                    pass
            if tcp_ok:
                status, body = self.http("GET", "/ping", timeout=1.0)
                if status == 200 and body.strip() == b"OK":
                    self.http_ok = True
                    return
            time.sleep(0.1)
        if tcp_ok:
            say(f"warning: TCP is up but HTTP /ping on {self.http_port} never answered OK; /stats checks skipped")
            return
        raise RuntimeError(f"nsqd did not accept TCP connections within {timeout}s\n{self.log_tail()}")

    def http(self, method: str, path: str, timeout: float = 5.0, **params: str) -> tuple[int, bytes]:
        """One HTTP request to the server; ``(0, b'')`` on connection failure."""
        url = f"http://127.0.0.1:{self.http_port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (OSError, ValueError):
            return 0, b""

    def stats(self, topic: str) -> tuple[dict[str, Any] | None, str]:
        """``/stats?format=json`` for one topic: ``(document, "")`` or ``(None, why not)``."""
        if not self.http_ok:
            return None, "HTTP not available"
        status, body = self.http("GET", "/stats", format="json", topic=topic, include_clients="false")
        if status != 200:
            return None, f"GET /stats -> {status} {body[:100]!r}"
        try:
            return json.loads(body), ""
        except ValueError:
            return None, f"GET /stats: not JSON: {body[:100]!r}"

    def precreate(self, topic: str, channel: str) -> str:
        """Create topic and channel with a short-lived TCP ``SUB`` (works on any nsqd); returns an error or ``""``."""
        try:
            with socket.create_connection(("127.0.0.1", self.tcp_port), timeout=5.0) as s:
                s.sendall(f"  V2SUB {topic} {channel}\n".encode())
                data = b""
                while len(data) < 8 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            if data[4:8] != b"\0\0\0\0" or data[8:10] != b"OK":
                return f"SUB {topic} {channel} -> {data[:100]!r}"
        except OSError as exc:
            return f"SUB {topic} {channel}: {exc}"
        return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float) -> dict[str, Any]:
        """SIGTERM, wait up to ``timeout``, SIGKILL if needed; report how it went."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return {"exit_code": self.proc.returncode, "shutdown_s": 0.0, "killed": False, "died_early": True}
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
            killed = False
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
            killed = True
        return {"exit_code": code, "shutdown_s": time.monotonic() - t0, "killed": killed, "died_early": False}

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    | " + x for x in lines[-n:])

    def log_findings(self) -> dict[str, Any]:
        """Count ERROR-ish and WARN lines in the server's log."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return {"lines": 0, "errors": 0, "warnings": 0, "error_samples": []}
        errs = [x for x in lines if _LOG_ERROR_RE.search(x)]
        warns = [x for x in lines if _LOG_WARN_RE.search(x)]
        return {
            "lines": len(lines),
            "errors": len(errs),
            "warnings": len(warns),
            "error_samples": errs[:10],
            "warning_samples": warns[:5],
        }


# ---------------------------------------------------------------------------------------------------------------
# load generators


def tool_cmd(tool: str, args: list[str]) -> list[str]:
    return [sys.executable, str(HERE / tool), *args, "--json"]


def run_tool(cmd: list[str], timeout: float) -> dict[str, Any]:
    """Run a load generator to completion; its stderr passes through, its last stdout line is the JSON summary."""
    say("running: " + shlex.join(cmd[1:]))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    return finish_tool(proc, timeout)


def finish_tool(proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """Wait for a load generator (killing its process group after ``timeout``) and parse its JSON summary."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(10)
        return {"fatal": [f"timed out after {timeout:.0f}s"], "rc": None}
    lines = [x for x in out.decode(errors="replace").splitlines() if x.strip()]
    try:
        res = json.loads(lines[-1])
    except (IndexError, ValueError):
        res = {"fatal": ["no JSON summary on stdout"]}
    res["rc"] = proc.returncode
    return res


def writer_args(a: argparse.Namespace, addr: str) -> list[str]:
    return [
        "--nsqd-tcp-address",
        addr,
        "--topic",
        a.topic,
        "--size",
        str(a.size),
        "--batch-size",
        str(a.batch_size),
        "--runfor",
        fmt_duration(a.runfor),
        "--procs",
        str(a.writer_procs or a.procs),
        "--pipeline",
        str(a.pipeline),
    ]


def reader_args(a: argparse.Namespace, addr: str, runfor: float) -> list[str]:
    args = [
        "--nsqd-tcp-address",
        addr,
        "--topic",
        a.topic,
        "--channel",
        a.channel,
        "--size",
        str(a.size),
        "--rdy",
        str(a.rdy),
        "--runfor",
        fmt_duration(runfor),
        "--procs",
        str(a.reader_procs or a.procs),
        "--idle-timeout",
        fmt_duration(a.idle_timeout),
    ]
    if a.output_buffer_size is not None:
        args += ["--output-buffer-size", str(a.output_buffer_size)]
    if a.output_buffer_timeout is not None:
        args += ["--output-buffer-timeout", str(a.output_buffer_timeout)]
    return args


# ---------------------------------------------------------------------------------------------------------------
# report


def find_channel(stats: dict[str, Any] | None, topic: str, channel: str) -> tuple[dict | None, dict | None]:
    """Pick the topic and channel entries out of a /stats JSON document."""
    if not stats:
        return None, None
    for t in stats.get("topics") or []:
        if t.get("topic_name") == topic:
            for c in t.get("channels") or []:
                if c.get("channel_name") == channel:
                    return t, c
            return t, None
    return None, None


def fms(ms: float) -> str:
    """Milliseconds with a precision that fits a column."""
    return f"{ms:.2f}ms" if ms < 1000 else f"{ms:.0f}ms"


def mib(n: int | float | None) -> str:
    return "-" if not n else f"{n / 1048576:.1f} MiB"


def print_report(rep: dict[str, Any]) -> None:
    """The human-readable summary table."""
    cfg = rep["config"]
    w, r = rep.get("writer") or {}, rep.get("reader") or {}
    out = sys.stdout.write
    out("\n=== nsqd benchmark ===\n")
    out(f"server  : {cfg['nsqd_cmd']} (pid {rep['server_pid']})\n")
    la = rep.get("loadavg_before", ())
    out(f"host    : {os.cpu_count()} CPUs, load average before the run {' '.join(f'{x:.2f}' for x in la)}\n")
    out(
        f"config  : mode={cfg['mode']} writer-procs={cfg['writer_procs']} reader-procs={cfg['reader_procs']}"
        f" size={cfg['size']}B batch={cfg['batch_size']} pipeline={cfg['pipeline']} rdy={cfg['rdy']}"
        f" runfor={cfg['runfor']:g}s mem-queue-size={cfg['mem_queue_size']}\n\n"
    )
    hdr = (
        f"{'phase':<9}{'msgs':>11}{'secs':>8}{'msgs/s':>11}{'MB/s':>9}  {'latency':<8}{'p50':>11}{'p99':>11}"
        f"{'max':>11}{'errors':>8}{'srv cpu':>9}{'cli cpu':>9}{'peak RSS':>12}\n"
    )
    out(hdr)
    out("-" * (len(hdr) - 1) + "\n")
    rows = [
        ("publish", w, "mpub_latency_ms", "MPUB", rep["phases"].get(rep["pub_phase"], {})),
        ("consume", r, "e2e_latency_ms", "e2e", rep["phases"].get(rep["sub_phase"], {})),
    ]
    for name, res, key, lname, ph in rows:
        if not res or "msgs" not in res:
            out(f"{name:<9} failed: {'; '.join(res.get('fatal', ['no result']))}\n")
            continue
        lat = res.get(key, {})
        cli = 100 * res.get("client_cpu_s", 0) / res["duration_s"] if res.get("duration_s") else 0
        out(
            f"{name:<9}{res['msgs']:>11}{res['duration_s']:>8.2f}{res['msgs_per_s']:>11.0f}{res['mb_per_s']:>9.2f}  "
            f"{lname:<8}{fms(lat.get('p50', 0)):>11}{fms(lat.get('p99', 0)):>11}{fms(lat.get('max', 0)):>11}"
            f"{res.get('errors', 0):>8}{ph.get('cpu_cores', 0) * 100:>8.0f}%{cli:>8.0f}%{mib(ph.get('rss_peak')):>12}\n"
        )
    out("\n")
    base = rep["phases"].get("idle", {})
    out(f"server RSS: idle {mib(base.get('rss_end'))}, peak {mib(rep['rss_peak'])}")
    for ph in ("publish", "settle", "consume", "pubsub"):
        st = rep["phases"].get(ph)
        if st:
            out(f", end of {ph} {mib(st['rss_end'])}")
    out("\n")
    sd = rep.get("shutdown", {})
    if sd:
        out(
            f"shutdown  : SIGTERM -> exit {sd.get('exit_code')} in {sd.get('shutdown_s', 0):.2f}s"
            f"{' (KILLED after timeout)' if sd.get('killed') else ''}"
            f"{' (server had already died)' if sd.get('died_early') else ''}\n"
        )
    lf = rep.get("log", {})
    out(
        f"server log: {lf.get('lines', 0)} lines, {lf.get('errors', 0)} error, {lf.get('warnings', 0)} warning"
        f" ({rep['log_path']})\n"
    )
    for line in lf.get("error_samples", []):
        out(f"    | {line[:300]}\n")
    if rep.get("log_tail"):
        out("server log tail:\n" + rep["log_tail"] + "\n")
    out("\nchecks:\n")
    for ok, text in rep["checks"]:
        out(f"  [{'skip' if ok is None else 'ok' if ok else 'FAIL'}] {text}\n")
    out("\n")
    sys.stdout.flush()


Checks = list[tuple[bool | None, str]]  # None = skipped


def new_report(a: argparse.Namespace, srv: Server, checks: Checks) -> dict[str, Any]:
    return {
        "config": {
            "nsqd_cmd": a.nsqd_cmd,
            "mode": a.mode,
            "procs": a.procs,
            "writer_procs": a.writer_procs or a.procs,
            "reader_procs": a.reader_procs or a.procs,
            "size": a.size,
            "batch_size": a.batch_size,
            "pipeline": a.pipeline,
            "rdy": a.rdy,
            "runfor": a.runfor,
            "mem_queue_size": a.mem_queue_size,
        },
        "checks": checks,
        "log_path": str(srv.log_path),
        "phases": {},
        "loadavg_before": os.getloadavg(),
    }


def load_pubsub(a: argparse.Namespace, srv: Server, sampler: Sampler, workdir: Path,
                tool_timeout: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Writer and reader at once; the reader learns how many messages to expect from a file."""
    addr = srv.tcp_addr
    expect_file = workdir / "expect"
    deadline = time.time() + 2.0
    timer = sampler.phase_at("pubsub", deadline)
    rcmd = tool_cmd(
        "bench_reader.py",
        [
            *reader_args(a, addr, a.runfor + a.consume_timeout),
            "--expect-file",
            str(expect_file),
            "--deadline",
            f"{deadline:.3f}",
        ],
    )
    wcmd = tool_cmd("bench_writer.py", [*writer_args(a, addr), "--deadline", f"{deadline:.3f}"])
    say("running: " + shlex.join(rcmd[1:]))
    rproc = subprocess.Popen(rcmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    w = run_tool(wcmd, tool_timeout)
    tmp = expect_file.with_suffix(".tmp")
    tmp.write_text(str(w.get("msgs", 0)))
    tmp.rename(expect_file)
    if not w.get("msgs"):
        os.killpg(rproc.pid, signal.SIGTERM)  # nothing to wait for
    r = finish_tool(rproc, tool_timeout)
    timer.cancel()
    sampler.set_phase("after")
    return w, r


def load_publish_then_consume(a: argparse.Namespace, srv: Server, sampler: Sampler, tool_timeout: float,
                              ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """Publish everything, then consume it; also the /stats document between the two."""
    addr = srv.tcp_addr
    deadline = time.time() + 1.0  # phase windows start with the load, not at process spawn
    timer = sampler.phase_at("publish", deadline)
    w = run_tool(tool_cmd("bench_writer.py", [*writer_args(a, addr), "--deadline", f"{deadline:.3f}"]), tool_timeout)
    timer.cancel()
    sampler.set_phase("settle")
    after_pub, _ = srv.stats(a.topic)
    time.sleep(0.5)
    published = w.get("msgs", 0)
    if published and srv.alive():
        deadline = time.time() + 1.0
        timer = sampler.phase_at("consume", deadline)
        rargs = [*reader_args(a, addr, a.consume_timeout), "--expect", str(published)]
        r = run_tool(tool_cmd("bench_reader.py", [*rargs, "--deadline", f"{deadline:.3f}"]), tool_timeout)
        timer.cancel()
    else:
        r = {"fatal": ["skipped: nothing was published" if srv.alive() else "skipped: server died"]}
    sampler.set_phase("after")
    return w, r, after_pub


def check_tools(checks: Checks, w: dict[str, Any], r: dict[str, Any]) -> None:
    """What the writer and the reader saw: every MPUB OK, every message consumed once and intact."""
    published, consumed = w.get("msgs", 0), r.get("msgs", 0)
    if "fatal" in w:
        checks.append((False, f"writer failed: {w['fatal']}"))
    else:
        checks.append(
            (
                w.get("errors", 0) == 0 and w.get("rc") == 0,
                f"every MPUB answered OK ({w.get('mpubs', 0)} MPUBs, {w.get('errors', 0)} errors)"
                + "".join(f"\n         {e}" for e in w.get("error_samples", [])[:5]),
            )
        )
    if "fatal" in r:
        checks.append((False, f"reader failed: {r['fatal']}"))
        return
    note = "" if consumed <= published else f" ({consumed - published} more than published: duplicates?)"
    checks.append((consumed == published, f"consumed {consumed} of {published} published messages{note}"))
    checks.append(
        (
            r.get("errors", 0) == 0,
            f"reader saw {r.get('errors', 0)} error frames/closures"
            + "".join(f"\n         {e}" for e in r.get("error_samples", [])[:5]),
        )
    )
    bad = r.get("bad_size", 0)
    checks.append((bad == 0, f"message frames of the expected size ({bad} bad)"))
    checks.append((r.get("redelivered", 0) == 0, f"no redeliveries (attempts > 1: {r.get('redelivered', 0)})"))


def check_stats(a: argparse.Namespace, srv: Server, checks: Checks, rep: dict[str, Any],
                after_pub: dict[str, Any] | None, published: int) -> None:
    """/stats agrees: the topic counted every message, the channel ends empty with nothing timed out."""
    if after_pub is not None:
        t, _ = find_channel(after_pub, a.topic, a.channel)
        mc = t.get("message_count") if t else None
        checks.append((mc == published, f"/stats topic message_count after publish = {mc} (published {published})"))
    doc, why = srv.stats(a.topic) if srv.alive() else (None, "server not running")
    if doc is None:
        checks.append((None, f"/stats checks skipped: {why}"))
        return
    end = time.monotonic() + 5.0
    while True:  # FINs may still be in the server's read buffer: give it a moment
        t, c = find_channel(doc, a.topic, a.channel)
        if (c and c.get("depth") == 0 and c.get("in_flight_count") == 0) or time.monotonic() > end:
            break
        time.sleep(0.2)
        doc = srv.stats(a.topic)[0]
    if c is None:
        checks.append((False, f"/stats has no channel {a.topic}/{a.channel} after consuming"))
    else:
        checks.append(
            (
                c.get("depth") == 0 and c.get("in_flight_count") == 0 and not c.get("timeout_count"),
                f"/stats channel after consume: depth={c.get('depth')}"
                f" in_flight={c.get('in_flight_count')} message_count={c.get('message_count')}"
                f" requeue={c.get('requeue_count')} timeout={c.get('timeout_count')}",
            )
        )
    rep["stats_after"] = {"topic": {k: v for k, v in (t or {}).items() if k != "channels"}, "channel": c}


def collect_phases(sampler: Sampler, rep: dict[str, Any]) -> None:
    sampler.stop()
    for ph in ("idle", "publish", "settle", "consume", "pubsub", "shutdown"):
        st = sampler.phase_stats(ph)
        if st:
            rep["phases"][ph] = st
    rep["rss_peak"] = sampler.peak()


def finish(a: argparse.Namespace, srv: Server, rep: dict[str, Any], checks: Checks, workdir: Path) -> int:
    """Log checks, the report (and its JSON), the work dir kept on failure; returns the exit status."""
    rep["log"] = srv.log_findings()
    sd = rep.get("shutdown", {})
    if sd.get("died_early") or sd.get("killed") or sd.get("exit_code") not in (0, None):
        rep["log_tail"] = srv.log_tail(20)
    checks.append((rep["log"]["errors"] == 0, f"no ERROR lines in the server log ({rep['log']['errors']})"))
    print_report(rep)
    if a.json_out:
        Path(a.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_out).write_text(json.dumps(rep, indent=2, default=str))
        say(f"wrote {a.json_out}")
    failed = any(ok is False for ok, _ in checks)
    if a.keep_data or failed:
        say(f"kept {workdir} (server log and data dir)")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def run(a: argparse.Namespace) -> int:
    """The whole benchmark: start nsqd, load it, check the results, stop it; returns the exit status."""
    cmd = shlex.split(a.nsqd_cmd)
    if not shutil.which(cmd[0]) and not Path(cmd[0]).exists():
        say(f"error: nsqd command not found: {cmd[0]}")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="nsqd-bench-"))
    srv = Server(cmd, workdir, a.mem_queue_size, a.nsqd_arg)
    checks: Checks = []
    rep = new_report(a, srv, checks)
    sampler: Sampler | None = None
    try:
        try:
            srv.start(a.startup_timeout)
        except RuntimeError as exc:
            say(f"error: {exc}")
            return 2
        assert srv.proc is not None
        rep["server_pid"] = srv.proc.pid
        sampler = Sampler(srv.proc.pid, a.sample_interval)
        sampler.start()
        sampler.set_phase("idle")
        time.sleep(0.5)
        if not a.no_precreate:
            err = srv.precreate(a.topic, a.channel)
            checks.append((not err, f"topic and channel created before the run {err}".rstrip()))
        tool_timeout = a.runfor + a.consume_timeout + 120
        if a.mode == "pubsub":
            rep["pub_phase"] = rep["sub_phase"] = "pubsub"
            (w, r), after_pub = load_pubsub(a, srv, sampler, workdir, tool_timeout), None
        else:
            rep["pub_phase"], rep["sub_phase"] = "publish", "consume"
            w, r, after_pub = load_publish_then_consume(a, srv, sampler, tool_timeout)
        rep["writer"], rep["reader"] = w, r
        checks.append((srv.alive(), "server still running after the load phases"))
        check_tools(checks, w, r)
        check_stats(a, srv, checks, rep, after_pub, w.get("msgs", 0))
        sampler.set_phase("shutdown")
        sd = rep["shutdown"] = srv.stop(a.shutdown_timeout)
        checks.append(
            (
                sd["exit_code"] == 0 and not sd["killed"] and not sd["died_early"],
                f"clean shutdown on SIGTERM (exit {sd['exit_code']}, {sd['shutdown_s']:.2f}s)",
            )
        )
    finally:
        if srv.alive():
            srv.stop(5)
        if sampler is not None:
            collect_phases(sampler, rep)
    return finish(a, srv, rep, checks, workdir)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--nsqd-cmd",
        default=str(DEFAULT_NSQD),
        help="server command (shell-quoted; e.g. a Go nsqd binary); listen/data flags are appended",
    )
    p.add_argument("--nsqd-arg", action="append", default=[], help="extra server flag (repeatable)")
    p.add_argument("--mode", choices=("pub-then-sub", "pubsub"), default="pub-then-sub")
    p.add_argument(
        "--procs",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="processes (= connections) for writer and reader (default: half the CPUs)",
    )
    p.add_argument("--writer-procs", type=int, default=0, help="override --procs for the writer")
    p.add_argument("--reader-procs", type=int, default=0, help="override --procs for the reader")
    p.add_argument("--runfor", type=parse_duration, default=10.0, help="publish duration (Go duration)")
    p.add_argument("--size", type=int, default=200, help="message size in bytes")
    p.add_argument("--batch-size", type=int, default=200, help="messages per MPUB")
    p.add_argument("--pipeline", type=int, default=1, help="MPUBs in flight per writer connection")
    p.add_argument("--rdy", type=int, default=2500, help="reader RDY per connection")
    p.add_argument("--output-buffer-size", type=int, default=None, help="reader IDENTIFY output_buffer_size")
    p.add_argument("--output-buffer-timeout", type=int, default=None, help="reader IDENTIFY output_buffer_timeout ms")
    p.add_argument(
        "--mem-queue-size",
        type=int,
        default=10_000_000,
        help="server --mem-queue-size (nsq's bench.py uses 10000000 so nothing hits the disk)",
    )
    p.add_argument("--topic", default="sub_bench")
    p.add_argument("--channel", default="ch")
    p.add_argument(
        "--no-precreate",
        action="store_true",
        help="do not create topic+channel (with a short TCP SUB) before publishing (messages then wait in the topic)",
    )
    p.add_argument("--consume-timeout", type=parse_duration, default=60.0, help="max length of the consume phase")
    p.add_argument("--idle-timeout", type=parse_duration, default=5.0, help="reader stops after this long without data")
    p.add_argument("--startup-timeout", type=parse_duration, default=20.0)
    p.add_argument("--shutdown-timeout", type=parse_duration, default=30.0)
    p.add_argument("--sample-interval", type=parse_duration, default=0.1, help="RSS/CPU sampling period")
    p.add_argument("--json-out", default=None, help="also write the full report as JSON (e.g. bench/results/x.json)")
    p.add_argument("--keep-data", action="store_true", help="keep the temporary data dir and server log")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
