#!/usr/bin/env python3
"""Consume throughput of nsqd over each IDENTIFY transport: plain, snappy, deflate, TLS, TLS+snappy, TLS+deflate.

Starts an nsqd (default ``<repo>/.venv/bin/nsqd``) on free loopback ports with a temp data dir, a throw-away
self-signed certificate and a large ``--mem-queue-size``. For each transport in turn it publishes ``--count``
messages of ``--size`` bytes with MPUB (plain TCP, batches of ``--batch``) into a fresh topic whose channel already
exists, then one consumer connection negotiates the transport, sends ``RDY --rdy`` and FINs every message
(all FINs of one received chunk in one write, compressed like everything else it sends) until it has them all.

Reported per transport: msgs/s and MB/s of message bodies (MiB, from the first RDY to the last message),
the bytes that crossed the socket (wire MB, i.e. after compression / TLS), and the CPU use of the server and of
this client during the consume phase (100% = one core: whichever side sits near 100% is the bottleneck), and the
server's CPU time per message (``srv us/msg``: the cost of a transport even when other load shares the CPUs).
Loopback only; every phase is bounded by ``--timeout``.

    .venv/bin/python bench/bench_transports.py                      # 200k x 200 B per transport
    .venv/bin/python bench/bench_transports.py --count 50000 --transports plain,tls
    .venv/bin/python bench/bench_transports.py --nsqd-cmd /path/to/go/nsqd   # the same run against Go's nsqd
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import json
import os
import random
import shlex
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nsqd_py.wire.compression import SnappyDecoder, snappy_encode  # noqa: E402

TRANSPORTS = ["plain", "snappy", "deflate", "tls", "tls+snappy", "tls+deflate"]
FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2
_II = struct.Struct(">ii")
_I = struct.Struct(">i")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---- setup ----------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed EC certificate for 127.0.0.1 (the consumer pins it as its only CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class Server:
    def __init__(self, cmd: list[str], workdir: Path, cert: Path, key: Path, extra: list[str]) -> None:
        self.tcp_port, self.http_port = free_port(), free_port()
        self.log_path = workdir / "nsqd.log"
        data = workdir / "data"
        data.mkdir()
        args = [*cmd, f"--tcp-address=127.0.0.1:{self.tcp_port}", f"--http-address=127.0.0.1:{self.http_port}",
                f"--https-address=127.0.0.1:{free_port()}", f"--data-path={data}", f"--tls-cert={cert}",
                f"--tls-key={key}", "--max-deflate-level=9", *extra]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nsqd exited:\n{self.log_path.read_text(errors='replace')}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/ping", timeout=1).read()
                return
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("nsqd did not start") from None
                time.sleep(0.05)

    def cpu_seconds(self) -> float:
        """utime + stime of the server process (its children too, for wrappers)."""
        total = 0.0
        pids = [self.proc.pid]
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            pids += [int(p) for p in children]
        except OSError:
            pass
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        return total

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stats(self, topic: str) -> dict:
        url = f"http://127.0.0.1:{self.http_port}/stats?format=json&topic={topic}"
        return json.loads(urllib.request.urlopen(url, timeout=10).read())

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


# ---- protocol -------------------------------------------------------------------------------------------------


class Conn:
    """A protocol V2 connection whose transport is negotiated by IDENTIFY (TLS, then snappy or deflate)."""

    def __init__(self, port: int, timeout: float) -> None:
        self.sock: socket.socket = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(b"  V2")
        self.buf = bytearray()
        self.wire_in = 0
        self.encode = lambda data: data
        self.decode = lambda data: data

    def send(self, data: bytes) -> None:
        self.sock.sendall(self.encode(data))

    def fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed by nsqd")
        self.wire_in += len(chunk)
        self.buf += self.decode(chunk)

    def frame(self) -> tuple[int, bytes]:
        while True:
            while len(self.buf) < 8:
                self.fill()
            size, ftype = _II.unpack_from(self.buf)
            while len(self.buf) < 4 + size:
                self.fill()
            data = bytes(self.buf[8:4 + size])
            del self.buf[:4 + size]
            if ftype == FRAME_RESPONSE and data == b"_heartbeat_":
                self.send(b"NOP\n")
                continue
            return ftype, data

    def expect_ok(self) -> None:
        ftype, data = self.frame()
        if (ftype, data) != (FRAME_RESPONSE, b"OK"):
            raise RuntimeError(f"expected OK, got {ftype} {data[:200]!r}")

    def command(self, line: bytes, body: bytes | None = None) -> None:
        self.send(line + b"\n" + (b"" if body is None else _I.pack(len(body)) + body))

    def negotiate(self, transport: str, ctx: ssl.SSLContext | None, identify: dict) -> dict:
        asks = {"feature_negotiation": True, "tls_v1": transport.startswith("tls"),
                "snappy": "snappy" in transport, "deflate": "deflate" in transport, **identify}
        self.command(b"IDENTIFY", json.dumps(asks).encode())
        ftype, data = self.frame()
        if ftype != FRAME_RESPONSE:
            raise RuntimeError(data.decode(errors="replace"))
        reply = json.loads(data)
        for feature in ("tls_v1", "snappy", "deflate"):
            if bool(reply[feature]) != bool(asks[feature]):
                raise RuntimeError(f"nsqd answered {feature}={reply[feature]} for transport {transport}")
        if reply["tls_v1"]:
            assert ctx is not None
            self.sock = ctx.wrap_socket(self.sock, server_hostname="127.0.0.1")
            self.expect_ok()
        if reply["snappy"]:
            decoder = SnappyDecoder()
            self.encode, self.decode = snappy_encode, decoder.decode
            self.buf = bytearray(decoder.decode(bytes(self.buf)))
            self.expect_ok()
        if reply["deflate"]:
            comp, decomp = zlib.compressobj(reply["deflate_level"], zlib.DEFLATED, -15), zlib.decompressobj(-15)
            self.encode = lambda data: comp.compress(data) + comp.flush(zlib.Z_SYNC_FLUSH)
            self.decode = decomp.decompress
            self.buf = bytearray(decomp.decompress(bytes(self.buf)))
            self.expect_ok()
        return reply

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def make_bodies(kind: str, size: int, count: int) -> list[bytes]:
    rnd = random.Random(7)
    if kind == "zeros":
        return [b"\0" * size] * count
    if kind == "random":
        return [rnd.randbytes(size) for _ in range(min(count, 4096))]
    # "text": JSON-ish events, moderately compressible (about what real payloads look like)
    out = []
    for i in range(min(count, 4096)):
        text = json.dumps({"id": i, "user": f"user-{rnd.randrange(10000)}", "event": rnd.choice(
            ["click", "view", "purchase", "signup"]), "ts": 1700000000 + i, "tags": ["alpha", "beta"],
            "token": rnd.randbytes(12).hex()}).encode()
        out.append((text + b" " * size)[:size])
    return out


def publish(port: int, topic: str, bodies: list[bytes], count: int, batch: int, timeout: float) -> float:
    conn = Conn(port, timeout)
    try:
        started = time.perf_counter()
        sent = 0
        while sent < count:
            n = min(batch, count - sent)
            msgs = [bodies[(sent + i) % len(bodies)] for i in range(n)]
            payload = _I.pack(n) + b"".join(_I.pack(len(b)) + b for b in msgs)
            conn.command(b"MPUB " + topic.encode(), payload)
            conn.expect_ok()
            sent += n
        return time.perf_counter() - started
    finally:
        conn.close()


def create_channel(port: int, topic: str, channel: str, timeout: float) -> None:
    conn = Conn(port, timeout)
    conn.command(b"SUB " + topic.encode() + b" " + channel.encode())
    conn.expect_ok()
    conn.close()


@dataclass
class Result:
    transport: str
    msgs: int
    secs: float
    body_bytes: int
    wire_bytes: int
    srv_cpu: float
    cli_cpu: float
    peak_rss: float
    errors: int


def consume(server: Server, transport: str, topic: str, channel: str, count: int, ctx: ssl.SSLContext,
            args: argparse.Namespace) -> Result:
    conn = Conn(server.tcp_port, args.timeout)
    identify = {"output_buffer_size": args.output_buffer_size, "output_buffer_timeout": args.output_buffer_timeout,
                "deflate_level": args.deflate_level}
    conn.negotiate(transport, ctx, identify)
    conn.command(b"SUB " + topic.encode() + b" " + channel.encode())
    conn.expect_ok()
    buf = conn.buf
    received = body_bytes = errors = 0
    wire_start = conn.wire_in
    cpu_start = server.cpu_seconds()
    cli_start = time.process_time()
    peak_rss = server.rss_mib()
    started = time.perf_counter()
    last_rss = started
    conn.send(b"RDY %d\n" % args.rdy)
    deadline = started + args.timeout
    while received < count:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{transport}: only {received}/{count} messages after {args.timeout}s")
        conn.fill()
        buf = conn.buf
        pos, end, fins = 0, len(buf), []
        while end - pos >= 8:
            size, ftype = _II.unpack_from(buf, pos)
            if end - pos < 4 + size:
                break
            if ftype == FRAME_MESSAGE:
                fins.append(b"FIN " + bytes(buf[pos + 18:pos + 34]) + b"\n")
                body_bytes += size - 30
            elif ftype == FRAME_ERROR:
                errors += 1
                print(f"  {transport}: error frame {bytes(buf[pos + 8:pos + 4 + size])!r}", file=sys.stderr)
            elif bytes(buf[pos + 8:pos + 4 + size]) == b"_heartbeat_":
                fins.append(b"NOP\n")
            pos += 4 + size
        del buf[:pos]
        if fins:
            received += sum(1 for f in fins if f.startswith(b"FIN"))
            conn.send(b"".join(fins))
        now = time.perf_counter()
        if now - last_rss > 0.2:
            peak_rss, last_rss = max(peak_rss, server.rss_mib()), now
    secs = time.perf_counter() - started
    srv_cpu = server.cpu_seconds() - cpu_start
    cli_cpu = time.process_time() - cli_start
    result = Result(transport, received, secs, body_bytes, conn.wire_in - wire_start, srv_cpu / secs,
                    cli_cpu / secs, max(peak_rss, server.rss_mib()), errors)
    conn.command(b"CLS")
    conn.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nsqd-cmd", default=str(REPO / ".venv" / "bin" / "nsqd"),
                        help="server command (shell-quoted); default: the repo's nsqd")
    parser.add_argument("--nsqd-arg", action="append", default=[], help="extra nsqd flag (repeatable)")
    parser.add_argument("--transports", default=",".join(TRANSPORTS), help="comma list of " + ", ".join(TRANSPORTS))
    parser.add_argument("--count", type=int, default=200_000, help="messages per transport")
    parser.add_argument("--size", type=int, default=200, help="message body size in bytes")
    parser.add_argument("--body", choices=["text", "random", "zeros"], default="text",
                        help="body content: JSON-ish text (default), incompressible random bytes, or zeros")
    parser.add_argument("--batch", type=int, default=1000, help="messages per MPUB")
    parser.add_argument("--rdy", type=int, default=2500)
    parser.add_argument("--output-buffer-size", type=int, default=65536)
    parser.add_argument("--output-buffer-timeout", type=int, default=0, help="ms; 0 = server default")
    parser.add_argument("--deflate-level", type=int, default=6)
    parser.add_argument("--mem-queue-size", type=int, default=10_000_000)
    parser.add_argument("--timeout", type=float, default=120, help="seconds allowed for each publish/consume phase")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds (transports interleaved); the table shows each transport's median round")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data, cert, nsqd.log)")
    args = parser.parse_args()
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    unknown = set(transports) - set(TRANSPORTS)
    if unknown:
        parser.error(f"unknown transports: {', '.join(sorted(unknown))}")

    workdir = Path(tempfile.mkdtemp(prefix="bench-transports-"))
    cert, key = make_cert(workdir)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cert)
    server = Server(shlex.split(args.nsqd_cmd), workdir, cert, key,
                    [f"--mem-queue-size={args.mem_queue_size}", *args.nsqd_arg])
    bodies = make_bodies(args.body, args.size, args.count)
    rounds: dict[str, list[Result]] = {t: [] for t in transports}
    failed = False
    try:
        idle_rss = server.rss_mib()
        for round_no in range(args.repeat):
            for transport in transports:
                topic = f"bench_{transport.replace('+', '_')}_{round_no}"
                create_channel(server.tcp_port, topic, "ch", args.timeout)
                pub_secs = publish(server.tcp_port, topic, bodies, args.count, args.batch, args.timeout)
                result = consume(server, transport, topic, "ch", args.count, ctx, args)
                rounds[transport].append(result)
                print(f"[bench_transports] round {round_no + 1} {transport:<12} published {args.count} in "
                      f"{pub_secs:.2f}s, consumed in {result.secs:.2f}s ({result.msgs / result.secs:,.0f} msgs/s), "
                      f"RSS {server.rss_mib():.0f} MiB", file=sys.stderr)
                channel = server.stats(topic)["topics"][0]["channels"][0]
                if result.msgs != args.count or result.errors or channel["depth"] or channel["in_flight_count"]:
                    failed = True
                    print(f"  {transport}: CHECK FAILED msgs={result.msgs} errors={result.errors} depth="
                          f"{channel['depth']} in_flight={channel['in_flight_count']}", file=sys.stderr)
                delete = f"http://127.0.0.1:{server.http_port}/topic/delete?topic={topic}"
                urllib.request.urlopen(urllib.request.Request(delete, method="POST"), timeout=10).read()
    finally:
        code = server.stop()
        if code != 0:
            print(f"[bench_transports] nsqd exited with {code}", file=sys.stderr)
        if args.keep or failed:
            print(f"[bench_transports] kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    results = [sorted(rs, key=lambda r: r.msgs / r.secs)[len(rs) // 2] for rs in rounds.values() if rs]
    base = results[0].msgs / results[0].secs if results else 0
    print()
    print(f"nsqd: {args.nsqd_cmd}   {args.count} msgs x {args.size} B ({args.body}) per transport, MPUB batch "
          f"{args.batch}, RDY {args.rdy}, output buffer {args.output_buffer_size} B, deflate level "
          f"{args.deflate_level}; median of {args.repeat} round(s); idle RSS {idle_rss:.0f} MiB; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    header = (f"{'transport':<12} {'msgs':>8} {'secs':>7} {'msgs/s':>10} {'MB/s':>7} {'wire MB':>8} "
              f"{'wire/body':>9} {'vs ' + results[0].transport if results else '':>10} {'srv cpu':>8} "
              f"{'cli cpu':>8} {'srv us/msg':>10} {'peak RSS':>9}")
    print(header)
    print("-" * len(header))
    for r in results:
        rate = r.msgs / r.secs
        print(f"{r.transport:<12} {r.msgs:>8} {r.secs:>7.2f} {rate:>10,.0f} {r.body_bytes / r.secs / 2**20:>7.2f} "
              f"{r.wire_bytes / 2**20:>8.1f} {r.wire_bytes / max(r.body_bytes, 1):>9.2f} "
              f"{rate / base:>10.2f} {r.srv_cpu:>8.0%} {r.cli_cpu:>8.0%} {r.srv_cpu * r.secs / r.msgs * 1e6:>10.2f} "
              f"{r.peak_rss:>5.0f} MiB")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
