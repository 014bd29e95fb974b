"""Seeded mutation fuzzing of both front doors of the real nsqd, bounded in time.

Valid sessions (and the hostile cases other tests pin down) are mutated - bytes flipped, inserted, deleted,
repeated, cut short, spliced with special tokens - and sent in random pieces. After every case the process
must be alive and serve a fresh client within a second; at the end its log must hold no Python traceback.

`NSQD_FUZZ_SECONDS` (default 20) is the budget per front door and `NSQD_FUZZ_SEED` replays a run; a failure
names the seed and the case, whose bytes are then worth adding to the corpus as a regression row.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time
from collections.abc import Callable, Iterator

import pytest

from nsqd_py.client.protocol import mpub_body
from tests.http.test_chunked import _chunked
from tests.http.test_request_head import REFUSED, SERVED
from tests.protocol.test_hostile_bytes import ACCEPTED
from tests.support import NsqdProcess, RawConn

BUDGET = float(os.environ.get("NSQD_FUZZ_SECONDS", "20"))
SEED = int(os.environ.get("NSQD_FUZZ_SEED", str(random.SystemRandom().randrange(1 << 32))))

TOKENS = [b"\r\n", b"\n", b"\r\n\r\n", b" ", b":", b"\x00", b"\xff", b"-1", b"+5", b"0x3", b"%", b"%zz", b"?",
          b"chunked", b"Transfer-Encoding: chunked\r\n", b"Content-Length: 99999999999999999999\r\n",
          b"Expect: 100-continue\r\n", b"Host: x\r\n", b"HTTP/1.1", b"HTTP/2.0", b"\x7f\xff\xff\xff",
          b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"IDENTIFY\n", b"PUB t\n", b"MPUB t\n", b"RDY 2500\n",
          b'{"snappy":true}', b'{"deflate":true}', b'{"tls_v1":true}', b"[" * 50, b"\\ud800"]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to four random edits of ``data``."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        pos = rng.randint(0, len(out))
        op = rng.randrange(7)
        if op == 0 and out:
            out[min(pos, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            out[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2:
            del out[pos : pos + rng.randint(1, 16)]
        elif op == 3:
            out[pos:pos] = rng.choice(TOKENS)
        elif op == 4:
            end = min(len(out), pos + rng.randint(1, 64))
            out[pos:pos] = out[pos:end] * rng.randint(1, 4)
        elif op == 5:
            del out[pos:]
        else:
            out[pos : pos + rng.randint(0, 8)] = rng.choice(TOKENS)
    return bytes(out)


def send_case(port: int, data: bytes, rng: random.Random, prefix: bytes = b"") -> None:
    """Send ``prefix + data`` in up to three pieces, read briefly, and hang up (or be hung up on)."""
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.settimeout(0.1)
        payload = prefix + data
        cuts = sorted(rng.sample(range(len(payload) + 1), k=min(2, len(payload) + 1)))
        try:
            for start, end in zip([0, *cuts], [*cuts, len(payload)], strict=True):
                if payload[start:end]:
                    sock.sendall(payload[start:end])
            while sock.recv(65536):
                pass
        except OSError:  # timeouts, resets and closed pipes are all fine answers to garbage
            pass


def assert_serves(nsqd: NsqdProcess, case: str) -> None:
    assert nsqd.proc is not None and nsqd.proc.poll() is None, f"nsqd died on {case}"
    conn = RawConn(nsqd.tcp_port, timeout=5)  # that it serves, not how fast: the suite loads the machine
    try:
        conn.send("PUB fuzz_probe", b"x")
        assert conn.frame() == (0, b"OK"), case
    finally:
        conn.close()
    with socket.create_connection(("127.0.0.1", nsqd.http_port), timeout=5) as sock:
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK"), case


def http_corpus() -> list[bytes]:
    pub = b"POST /pub?topic=fz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    mpub = b"POST /mpub?topic=fz HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\none\ntwo\n"
    binary = mpub_body([b"a", b"bb"])
    mpub_bin = (b"POST /mpub?topic=fz&binary=true HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(binary)
                + binary)
    chunked = _chunked("/pub?topic=fz", b"5\r\nhello\r\n0\r\n\r\n")
    config = b"PUT /config/log_level HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\ninfo"
    gets = [b"GET /stats?format=json HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /info HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /channel/create?topic=fz&channel=c HTTP/1.1\r\nHost: x\r\n\r\n"]
    rows = [data for data, _ in REFUSED.values()] + [data for data, _ in SERVED.values()]
    return [pub, mpub, mpub_bin, chunked, config, pub + pub, *gets, *rows]


def tcp_corpus() -> list[bytes]:
    def cmd(line: bytes, body: bytes | None = None) -> bytes:
        return line + b"\n" + (b"" if body is None else struct.pack(">i", len(body)) + body)

    identify = cmd(b"IDENTIFY", b'{"feature_negotiation":true,"heartbeat_interval":1000}')
    session = (identify + cmd(b"SUB fz c") + cmd(b"RDY 10") + cmd(b"PUB fz", b"hello")
               + cmd(b"MPUB fz", mpub_body([b"a", b"b"]))
               + cmd(b"DPUB fz 100", b"later") + cmd(b"FIN 0123456789abcdef") + cmd(b"REQ 0123456789abcdef 0")
               + cmd(b"TOUCH 0123456789abcdef") + cmd(b"NOP") + cmd(b"CLS"))
    mpub = cmd(b"MPUB fz", mpub_body([b"x" * 10, b"y" * 20]))
    identifies = [cmd(b"IDENTIFY", body) for body, _ in ACCEPTED.values()]
    return [session, mpub, cmd(b"AUTH", b"secret"), cmd(b"PUB fz", b"x") * 3, *identifies]


@pytest.fixture(scope="module")
def fuzz_nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsqdProcess]:
    proc = NsqdProcess(tmp_path_factory.mktemp("fuzz"), "--max-msg-size=4096", "--max-body-size=65536",
                       "--mem-queue-size=100").start()
    # the probe's topic exists before the first probe: its PUB never waits for nsqd.dat's fsync on a busy disk
    assert proc.request("POST", "/topic/create?topic=fuzz_probe").status == 200
    yield proc
    proc.stop()


def run_fuzz(nsqd: NsqdProcess, port: int, corpus: list[bytes], prefix: bytes,
             probe: Callable[[NsqdProcess, str], None]) -> int:
    rng = random.Random(SEED)
    deadline = time.monotonic() + BUDGET
    cases = 0
    for data in corpus:  # the corpus itself first, unmutated
        send_case(port, data, rng, prefix)
        probe(nsqd, f"corpus case {data[:60]!r}")
    while time.monotonic() < deadline:
        case = mutate(rng, rng.choice(corpus))
        send_case(port, case, rng, prefix)
        cases += 1
        probe(nsqd, f"seed {SEED} case {cases}: {case[:200]!r}")
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("listener", ["http", "tcp"])
def test_fuzz(fuzz_nsqd: NsqdProcess, listener: str) -> None:
    if listener == "http":
        cases = run_fuzz(fuzz_nsqd, fuzz_nsqd.http_port, http_corpus(), b"", assert_serves)
    else:
        cases = run_fuzz(fuzz_nsqd, fuzz_nsqd.tcp_port, tcp_corpus(), b"  V2", assert_serves)
    print(f"{listener} fuzz: {cases} mutated cases, seed {SEED}")
    assert cases > 0
    assert "Traceback" not in fuzz_nsqd.log(), f"seed {SEED}"
