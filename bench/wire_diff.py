"""Broken snappy and deflate streams sent to our nsqd and to Go's, side by side: which answers differ.

    .venv/bin/python bench/wire_diff.py --go-dir ../shared/reference-go --cases 1000

Each case negotiates compression with IDENTIFY, then sends a mutated compressed session (SUB, RDY, PUB, MPUB,
DPUB, FIN, REQ, TOUCH, NOP, CLS on a topic of its own) in one write, and reads until the server closes or has
been quiet for ``--quiet`` seconds. The answer is what came back (message frames reduced to their body) and
whether the connection was closed; the first frame and the close are compared. Differing cases are printed with
their bytes, grouped by kind, so that Go's answers can be recorded as test rows (tests/security).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import socket
import struct
import sys
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compare_go import OURS, Server

from nsqd_py.wire.compression import CodecError, DeflateDecoder, SnappyDecoder
from tests.security.test_fuzz import mutate
from tests.security.test_hostile_input import STREAM_ID, compressed_chunk, uncompressed_chunk

Answer = tuple[tuple[tuple[int, bytes], ...], bool]


def session(topic: bytes) -> list[bytes]:
    """The commands of one case, in the pieces they are compressed in."""
    def cmd(line: bytes, body: bytes | None = None) -> bytes:
        return line + b"\n" + (b"" if body is None else struct.pack(">i", len(body)) + body)

    mpub = struct.pack(">i", 2) + struct.pack(">i", 1) + b"a" + struct.pack(">i", 2) + b"bb"
    return [cmd(b"SUB " + topic + b" c"), cmd(b"RDY 10"), cmd(b"PUB " + topic, b"hello"),
            cmd(b"MPUB " + topic, mpub), cmd(b"DPUB " + topic + b" 100", b"later"),
            cmd(b"FIN 0123456789abcdef"), cmd(b"REQ 0123456789abcdef 0"), cmd(b"TOUCH 0123456789abcdef"),
            cmd(b"NOP"), cmd(b"CLS")]


def snappy_wire(pieces: list[bytes], rng: random.Random) -> bytes:
    return STREAM_ID + b"".join(compressed_chunk(p) if rng.random() < 0.5 else uncompressed_chunk(p) for p in pieces)


def deflate_wire(pieces: list[bytes], rng: random.Random) -> bytes:
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    out = b"".join(comp.compress(p) + comp.flush(zlib.Z_SYNC_FLUSH) for p in pieces)
    return out + (comp.flush() if rng.random() < 0.2 else b"")


def answer(port: int, codec: str, wire: bytes, quiet: float) -> Answer:
    """Negotiate ``codec``, send ``wire``, collect frames until close or quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        body = json.dumps({"feature_negotiation": True, codec: True}).encode()
        sock.sendall(b"  V2IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        raw = b""
        while len(raw) < 4 or len(raw) < 4 + struct.unpack(">i", raw[:4])[0]:
            raw += sock.recv(65536)
        rest = raw[4 + struct.unpack(">i", raw[:4])[0]:]
        with contextlib.suppress(OSError):  # the server may hang up before it has all of the case
            sock.sendall(wire)
        closed = False
        sock.settimeout(quiet)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    closed = True
                    break
                rest += data
        except TimeoutError:
            pass
        except OSError:
            closed = True
    return _frames(_decompress(codec, rest))[1:], closed  # [0] is the OK of the upgrade


def _decompress(codec: str, data: bytes) -> bytes:
    """What the server's compressed answers decode to, up to where they were cut off (by its close)."""
    if codec == "snappy":
        try:
            return SnappyDecoder().decode(data)
        except CodecError as err:
            return err.partial
    decoder = DeflateDecoder()
    out = []
    try:
        out.append(decoder.decode(data))
        while decoder.has_pending:
            out.append(decoder.decode(b""))
    except CodecError as err:
        out.append(err.partial)
    return b"".join(out) + decoder.finish()  # what came after the last flush marker too


def _frames(data: bytes) -> tuple[tuple[int, bytes], ...]:
    out = []
    pos = 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack_from(">ii", data, pos)
        payload = data[pos + 8: pos + 4 + size]
        out.append((kind, payload[26:] if kind == 2 else payload))
        pos += 4 + size
    return tuple(out)


def first(ans: Answer) -> tuple[object, bool]:
    frames, closed = ans
    return (frames[0] if frames else None), closed


def kind(ours: Answer, go: Answer) -> str:
    (o_first, o_closed), (g_first, _) = first(ours), first(go)
    if o_first == g_first:
        return "go keeps it open, ours closes" if o_closed else "go closes, ours stays open"
    if g_first is None:
        return f"ours answers {str(o_first[1][:16]) if o_first else None}, go nothing"
    if o_first is None:
        return "go answers, ours nothing"
    return "different answers"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go-dir", type=Path, required=True)
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quiet", type=float, default=0.3)
    parser.add_argument("--nsqd", type=Path, default=OURS)
    args = parser.parse_args()
    flags = ("--max-msg-size=4096", "--max-body-size=65536", "--mem-queue-size=100")
    ours, go = Server(args.nsqd, *flags), Server(args.go_dir / "nsqd", *flags)
    rng = random.Random(args.seed)
    kinds: Counter[str] = Counter()
    differing = 0
    try:
        with ThreadPoolExecutor(2) as pool:
            for i in range(args.cases):
                codec = rng.choice(["snappy", "deflate"])
                pieces = session(b"f%05d" % i)
                wire = (snappy_wire if codec == "snappy" else deflate_wire)(pieces, rng)
                case = mutate(rng, wire)
                o, g = pool.map(answer, (ours.tcp, go.tcp), [codec] * 2, [case] * 2, [args.quiet] * 2)
                if first(o) != first(g):
                    differing += 1
                    k = f"{codec}: {kind(o, g)}"
                    kinds[k] += 1
                    print(f"case {i} {k}\n  wire {case!r}\n  ours {o}\n  go   {g}", flush=True)
    finally:
        ours.stop()
        go.stop()
    print(f"\n{differing} of {args.cases} first answers differ (seed {args.seed}, {time.strftime('%Y-%m-%d')})")
    for k, n in kinds.most_common():
        print(f"{n:5d}  {k}")


if __name__ == "__main__":
    main()
