"""Faults at the durable settings, against our nsqd and Go's: what each acknowledges and what it loses (issue 39).

    .venv/bin/python bench/bench_faults.py --go ../shared/reference-go/nsqd [--rounds 4]

Three faults, each on a fresh data dir, both servers alike (`--mem-queue-size=0 --sync-every=1`):

* **power loss**: the data dir on tests/persistence/powerloss_fs.py (a FUSE filesystem that drops every write no
  completed fsync covers); under load from 3 publishers (single PUBs, each waiting for its answer) and a consumer,
  the server is killed (-9) and the filesystem unmounted, ``--rounds`` times; then everything left is drained.
  Lost = acknowledged, never received.
* **failing fsyncs**: the server under `strace --inject` so that every fsync/fdatasync of the topic's first data
  file after the 10th fails with EIO; 3 publishers for 3 s. Counts the OKs given while syncs were failing (each an
  acknowledgement of a message not known to be on disk) and the errors, then restarts the server without the fault
  and counts what was lost.

* **slow disk**: every fsync/fdatasync of topic `slow`'s data file takes 1 s (strace's delay_exit); one publisher
  to it and 3 to topic `fast` for 6 s. Shows whether one slow queue holds up the others: the fast topic's rate and
  the latency of its OKs.

With --defaults, the power-loss run again at the default settings. Needs root (mount, strace), libfuse2 and fusepy
(`make fuse-deps strace-deps`, the test extras).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FS = HERE.parent / "tests" / "persistence" / "powerloss_fs.py"
OURS = Path(sys.executable).parent / "nsqd"
DURABLE = ("--mem-queue-size=0", "--sync-every=1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(b"  V2")
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self) -> tuple[int, bytes]:
        size, ftype = struct.unpack(">ii", self._read(8))
        return ftype, self._read(size - 4)


class Server:
    def __init__(self, binary: Path, data: Path, prefix: list[str] | None = None,
                 flags: tuple[str, ...] = DURABLE) -> None:
        self.tcp = free_port()
        self.proc = subprocess.Popen([*(prefix or []), str(binary), f"--tcp-address=127.0.0.1:{self.tcp}",
                                      f"--http-address=127.0.0.1:{free_port()}", f"--data-path={data}", *flags],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.tcp), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{binary} did not start")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """``sig`` to the server itself (under strace, to strace's child)."""
        children = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        for pid in children or [str(self.proc.pid)]:
            os.kill(int(pid), sig)
        self.proc.wait(30)


class Load:
    """3 publishers and (optionally) a consumer on topic `soak`, channel `c`, until stopped or the server goes."""

    def __init__(self, port: int, name: str, consume: bool) -> None:
        self.acknowledged: set[bytes] = set()
        self.errors = 0
        self.consumed: set[bytes] = set()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._publish, args=(port, f"{name}p{n}")) for n in range(3)]
        if consume:
            self.threads.append(threading.Thread(target=self._consume, args=(port,)))
        for thread in self.threads:
            thread.start()

    def _publish(self, port: int, prefix: str) -> None:
        try:
            conn = Conn(port)
            i = 0
            while not self.stop.is_set():
                body = f"{prefix}-{i}".encode()
                i += 1
                conn.send(b"PUB soak\n" + struct.pack(">i", len(body)) + body)
                if conn.frame() == (0, b"OK"):
                    self.acknowledged.add(body)
                else:
                    self.errors += 1
                    conn = Conn(port)
        except OSError:
            return

    def _consume(self, port: int) -> None:
        try:
            conn = Conn(port)
            conn.send(b"SUB soak c\nRDY 20\n")
            while not self.stop.is_set():
                ftype, data = conn.frame()
                if ftype == 2:
                    self.consumed.add(data[26:])
                    conn.send(b"FIN " + data[10:26] + b"\n")
        except OSError:
            return

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(15)


def drain(port: int) -> set[bytes]:
    conn = Conn(port)
    conn.send(b"SUB soak c\nRDY 200\n")
    conn.sock.settimeout(2.0)
    got: set[bytes] = set()
    try:
        while True:
            ftype, data = conn.frame()
            if ftype == 2:
                got.add(data[26:])
                conn.send(b"FIN " + data[10:26] + b"\n")
    except (TimeoutError, ConnectionError):
        return got


def power_loss(binary: Path, rounds: int, flags: tuple[str, ...] = DURABLE) -> str:
    with tempfile.TemporaryDirectory(prefix="powerloss-") as root:
        backing, mnt, stats = Path(root, "backing"), Path(root, "mnt"), Path(root, "dropped")
        backing.mkdir()
        mnt.mkdir()

        def mount() -> subprocess.Popen[bytes]:
            fs = subprocess.Popen([sys.executable, str(FS), str(backing), str(mnt), str(stats)])
            while not os.path.ismount(mnt):
                time.sleep(0.05)
            return fs

        fs = mount()
        data = mnt / "data"
        data.mkdir()
        acknowledged: set[bytes] = set()
        received: set[bytes] = set()
        for n in range(rounds):
            server = Server(binary, data, flags=flags)
            if n == 0:
                Conn(server.tcp).send(b"SUB soak c\n")  # the channel exists before any PUB
                time.sleep(0.2)
            load = Load(server.tcp, f"r{n}", consume=True)
            time.sleep(1.5)
            server.kill()
            load.finish()
            acknowledged |= load.acknowledged
            received |= load.consumed
            subprocess.run(["umount", str(mnt)], check=True)
            fs.wait(20)
            fs = mount()
        server = Server(binary, data, flags=flags)
        received |= drain(server.tcp)
        server.kill(signal.SIGTERM)
        subprocess.run(["umount", str(mnt)], check=True)
        fs.wait(20)
        lost = sorted(acknowledged - received)
        example = f", e.g. {b' '.join(lost[:6]).decode()}" if lost else ""
        return f"{len(lost)} lost of {len(acknowledged)} acknowledged ({rounds} crashes){example}"


def failing_fsyncs(binary: Path) -> str:
    with tempfile.TemporaryDirectory(prefix="fsync-eio-") as root:
        data = Path(root)
        path = data / "soak.diskqueue.000000.dat"
        strace = ["strace", "-f", "-qq", "--seccomp-bpf", "-o", "/dev/null", "-P", str(path),
                  "--trace=fsync,fdatasync", "--inject=fsync,fdatasync:error=EIO:when=10+"]
        server = Server(binary, data, prefix=strace)
        load = Load(server.tcp, "eio", consume=False)
        time.sleep(3)
        load.finish()
        server.kill(signal.SIGTERM)
        server = Server(binary, data)
        got = drain(server.tcp)
        server.kill(signal.SIGTERM)
        lost = len(load.acknowledged - got)
        return (f"{len(load.acknowledged)} OKs ({len(load.acknowledged & got)} of them read back), {load.errors} "
                f"errors; {lost} acknowledged lost after a restart")


def _timed_publishes(port: int, topic: str, stop: threading.Event, latencies: list[float]) -> None:
    """Single PUBs to ``topic``, each waiting for its OK, until ``stop``; the latency of each OK goes to
    ``latencies``."""
    conn = Conn(port)
    i = 0
    while not stop.is_set():
        body = f"{topic}-{i}".encode()
        i += 1
        started = time.monotonic()
        conn.send(f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body)
        if conn.frame() == (0, b"OK"):
            latencies.append(time.monotonic() - started)


def slow_disk(binary: Path, seconds: float = 6.0) -> str:
    """Every fsync of topic `slow`'s data file takes 1 s; a publisher to it and 3 to topic `fast` for ``seconds``."""
    with tempfile.TemporaryDirectory(prefix="slow-disk-") as root:
        data = Path(root)
        strace = ["strace", "-f", "-qq", "--seccomp-bpf", "-o", "/dev/null", "-P",
                  str(data / "slow.diskqueue.000000.dat"), "--trace=fsync,fdatasync",
                  "--inject=fsync,fdatasync:delay_exit=1000000"]
        server = Server(binary, data, prefix=strace)
        stop = threading.Event()
        slow: list[float] = []
        fast: list[list[float]] = [[], [], []]
        threads = [threading.Thread(target=_timed_publishes, args=(server.tcp, "slow", stop, slow))]
        threads += [threading.Thread(target=_timed_publishes, args=(server.tcp, "fast", stop, each)) for each in fast]
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join(15)
        server.kill(signal.SIGTERM)
        latencies = sorted(x for each in fast for x in each)
        if not latencies:
            return f"slow topic {len(slow)} OKs; fast topic: no OK in {seconds:.0f} s"

        def ms(q: float) -> str:
            return f"{latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000:.1f}"

        return (f"slow topic {len(slow)} OKs in {seconds:.0f} s; fast topic {len(latencies) / seconds:.0f} OK/s, "
                f"latency p50 {ms(0.5)} ms, p99 {ms(0.99)} ms, max {latencies[-1] * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go", type=Path, help="Go's nsqd binary")
    parser.add_argument("--nsqd", type=Path, default=OURS, help="our nsqd executable")
    parser.add_argument("--rounds", type=int, default=4, help="crashes in the power-loss run")
    parser.add_argument("--defaults", action="store_true",
                        help="also the power-loss run at the default settings (memory queues of 10,000, sync every "
                             "2,500 messages or 2 s): what the README's durability table says is lost")
    parser.add_argument("--only", choices=["power-loss", "failing-fsyncs", "slow-disk"], help="run one fault only")
    args = parser.parse_args()
    servers = [("nsqd-py", args.nsqd)] + ([("Go nsqd", args.go)] if args.go else [])
    print(f"faults at --mem-queue-size=0 --sync-every=1, {time.strftime('%Y-%m-%d')}, "
          f"load average {os.getloadavg()[0]:.2f}")
    for who, binary in servers:
        if args.only in (None, "power-loss"):
            print(f"{who:8s} power loss:      {power_loss(binary, args.rounds)}", flush=True)
        if args.only in (None, "failing-fsyncs"):
            print(f"{who:8s} failing fsyncs:  {failing_fsyncs(binary)}", flush=True)
        if args.only in (None, "slow-disk"):
            print(f"{who:8s} slow disk:       {slow_disk(binary)}", flush=True)
        if args.defaults:
            print(f"{who:8s} power loss at the defaults: {power_loss(binary, args.rounds, flags=())}", flush=True)


if __name__ == "__main__":
    main()
