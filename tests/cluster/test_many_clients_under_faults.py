"""Many connections while something is wrong (issue 39): 10,000 idle clients, consumers that never read what
they asked for, and the only lookupd stopped (SIGSTOP). A working producer and consumer still get everything
through, and nsqd's memory stays bounded by what flow control allows, not by what was published."""

from __future__ import annotations

import os
import resource
import signal
import socket
import struct
from pathlib import Path

import pytest

from tests.cluster.conftest import LookupdFactory
from tests.support import FRAME_MESSAGE, FRAME_RESPONSE, RawConn

pytestmark = pytest.mark.slow

#: the issue's 10k idle clients, where the descriptor limit allows (the test and nsqd each hold one per client)
IDLE = 10_000
STUCK = 4
RDY = 500
MESSAGES = 10_000
BODY = b"m" * 1000


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _idle_clients() -> int:
    """IDLE, or fewer when the hard descriptor limit is lower; the soft limit is raised for this process and the
    nsqd it starts."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = IDLE + 1000
    if hard != resource.RLIM_INFINITY and hard < wanted:
        wanted = hard
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return min(IDLE, wanted - 1000)


def test_idle_and_stuck_clients_with_lookupd_stopped(lookupd_factory: LookupdFactory, cluster_nsqd) -> None:
    idle_clients = _idle_clients()
    assert idle_clients >= 2000, "the descriptor limit leaves room for too few clients to mean anything"
    lookupd = lookupd_factory()
    nsqd = cluster_nsqd(lookupd, extra=("--max-rdy-count=2500",))
    assert nsqd.proc is not None and lookupd.process is not None
    producer = nsqd.connect()
    producer.send("PUB load", b"x")  # topic and, below, channel exist before the lookupd stops
    assert producer.frame() == (FRAME_RESPONSE, b"OK")
    os.kill(lookupd.process.pid, signal.SIGSTOP)
    idle: list[socket.socket] = []
    stuck: list[RawConn] = []
    try:
        before_idle = _rss_mib(nsqd.proc.pid)
        for _ in range(idle_clients):
            sock = socket.create_connection(("127.0.0.1", nsqd.tcp_port))
            sock.sendall(b"  V2")
            idle.append(sock)
        for _ in range(STUCK):  # they ask for RDY messages and never read one
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", nsqd.tcp_port))
            conn = RawConn(sock)
            assert conn.sub("load", "c") == (FRAME_RESPONSE, b"OK")
            conn.send(f"RDY {RDY}")
            stuck.append(conn)
        baseline = _rss_mib(nsqd.proc.pid)
        # Go's nsqd gives each client a 16 KiB read and a 16 KiB write buffer; ours cost less than that together
        per_idle_kib = (baseline - before_idle) * 1024 / idle_clients
        assert per_idle_kib < 32, f"{per_idle_kib:.1f} KiB per idle connection"
        batch = 100
        body = struct.pack(">i", batch) + (struct.pack(">i", len(BODY)) + BODY) * batch
        for _ in range(MESSAGES // batch):
            producer.send_raw(b"MPUB load\n" + struct.pack(">i", len(body)) + body)
            assert producer.frame() == (FRAME_RESPONSE, b"OK")
        live = RawConn(nsqd.tcp_port, timeout=30)
        live.identify(output_buffer_timeout=-1)
        assert live.sub("load", "c") == (FRAME_RESPONSE, b"OK")
        live.send("RDY 200")
        received = 0
        # all but what the stuck consumers hold in flight (and the first "x") reaches the working consumer
        while received < MESSAGES + 1 - STUCK * RDY:
            ftype, data = live.frame()
            if ftype == FRAME_MESSAGE:
                received += 1
                live.send(b"FIN " + data[10:26])
        grown = _rss_mib(nsqd.proc.pid) - baseline
        # 10 MB were published, all of it fitting the default memory queue; the stuck consumers hold at most RDY
        # each: what memory grows by is the messages once (about 12 MiB measured), not a copy per client
        assert grown < 40, f"RSS grew {grown:.0f} MiB"
        assert "Traceback" not in nsqd.log()
    finally:
        os.kill(lookupd.process.pid, signal.SIGCONT)
        for sock in idle:
            sock.close()
        for conn in stuck:
            conn.close()
