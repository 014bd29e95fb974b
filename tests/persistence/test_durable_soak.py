"""kill -9 soak at the durable settings (issue 22): producers over TCP (PUB, MPUB) and HTTP (/pub) and a consumer
run flat out while nsqd is killed, restarted on the same data dir, and killed again. Nothing that got its OK and was
not FINed may be missing afterwards, from our nsqd and, when it is at hand, from Go's nsqd 1.3.0 reading the same
data dir (NSQ_GO_NSQD, else ../shared/reference-go/nsqd; the test passes without it)."""

from __future__ import annotations

import itertools
import shutil
import signal
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from nsqd_py.client.protocol import mpub_body
from tests.support import FRAME_RESPONSE, GO_NSQD, GoNsqd, NsqdProcess, RawConn, drain, wait_until

FLAGS = ("--mem-queue-size=0", "--sync-every=1", "--max-bytes-per-file=65536")  # small files: rolls under load
KILLS = 3

pytestmark = pytest.mark.slow


class Load:
    """Producers and one consumer against one nsqd, until stop(); what got OK and what was FINed is kept.

    Each TCP publisher sends PUB and MPUB of ``mpub_size`` in turn; a subclass with ``dpub_delay_ms`` (the delay of
    the i-th command) sends every fourth as a DPUB instead, and pauses ``pause`` seconds after each OK."""

    mpub_size = 50
    dpub_delay_ms: Callable[[int], int] | None = None
    pause = 0.0

    def __init__(self, proc: NsqdProcess, tag: str, acknowledged: list[bytes], finished: set[bytes]) -> None:
        self.proc, self.tag = proc, tag
        self.acknowledged, self.finished = acknowledged, finished
        self._stop = threading.Event()
        workers: list[Callable[..., None]] = [self._consume, self._tcp, self._tcp, self._http]
        self._threads = [threading.Thread(target=w, args=(n,), daemon=True) for n, w in enumerate(workers)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def _tcp(self, n: int) -> None:
        try:
            conn = RawConn(self.proc.tcp_port)
            for i in itertools.count():
                if self._stop.is_set():
                    return
                if i % 2:
                    batch = [f"{self.tag}-tcp{n}-{i}".encode()]
                    conn.send("PUB soak", batch[0])
                elif self.dpub_delay_ms is not None and i % 4 == 2:
                    batch = [f"{self.tag}-tcp{n}-{i}-d".encode()]
                    conn.send(f"DPUB soak {self.dpub_delay_ms(i)}", batch[0])
                else:
                    batch = [f"{self.tag}-tcp{n}-{i}-{j}".encode() for j in range(self.mpub_size)]
                    conn.send("MPUB soak", mpub_body(batch))
                if conn.frame() != (FRAME_RESPONSE, b"OK"):
                    return
                self.acknowledged.extend(batch)
                if self.pause:
                    time.sleep(self.pause)
        except (OSError, ConnectionError, struct.error):
            return

    def _http(self, n: int) -> None:
        session = requests.Session()
        try:
            for i in itertools.count():
                if self._stop.is_set():
                    return
                body = f"{self.tag}-http{n}-{i}".encode()
                reply = session.post(f"{self.proc.http_url}/pub?topic=soak", data=body, timeout=10)
                if (reply.status_code, reply.content) != (200, b"OK"):
                    return
                self.acknowledged.append(body)
        except requests.RequestException:
            return

    def _consume(self, n: int) -> None:
        try:
            conn = RawConn(self.proc.tcp_port)
            conn.identify()
            conn.sub("soak", "c")
            conn.send("RDY 100")
            while not self._stop.is_set():
                msg = conn.message()
                conn.send(b"FIN " + msg.id)
                self.finished.add(msg.body)  # counted as FINed only once the FIN is on its way
        except (OSError, ConnectionError, struct.error, AssertionError):
            return


def _missing(proc: NsqdProcess, acknowledged: list[bytes], finished: set[bytes]) -> list[bytes]:
    # a 50 ms output buffer: Go's nsqd never flushes a partial buffer for a client that disabled the timeout (-1)
    back = {m.body for m in drain(proc.tcp_port, "soak", "c", idle=1.5, limit=120, output_buffer_timeout=50)}
    return [body for body in acknowledged if body not in finished and body not in back]


def test_kill_9_soak_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "d"
    acknowledged: list[bytes] = []
    finished: set[bytes] = set()
    procs: list[NsqdProcess] = []
    try:
        for kill in range(KILLS):
            proc = NsqdProcess(data, *FLAGS).start()
            procs.append(proc)
            if kill == 0:
                for path in ("/topic/create?topic=soak", "/channel/create?topic=soak&channel=c"):
                    assert requests.post(proc.http_url + path, timeout=5).ok
            before = len(acknowledged)
            load = Load(proc, f"k{kill}", acknowledged, finished)
            wait_until(lambda start=before: len(acknowledged) - start > 500, timeout=60, what="the load to get going")
            time.sleep(0.3 + 0.4 * kill)  # the kill lands somewhere else in the write/sync cycle each time
            proc.stop(sig=signal.SIGKILL)
            load.stop()
        go_copy = tmp_path / "go"
        if GO_NSQD.exists():
            shutil.copytree(data, go_copy, ignore=shutil.ignore_patterns("*.log"))

        ours = NsqdProcess(data, *FLAGS).start()
        procs.append(ours)
        missing = _missing(ours, acknowledged, finished)
        assert not missing, f"ours lost {len(missing)} of {len(acknowledged)} acknowledged, e.g. {missing[:5]}"

        if GO_NSQD.exists():
            go = GoNsqd(go_copy, *FLAGS).start()
            procs.append(go)
            missing = _missing(go, acknowledged, finished)
            assert not missing, f"Go lost {len(missing)} of {len(acknowledged)} acknowledged, e.g. {missing[:5]}"
    finally:
        for proc in procs:
            proc.stop(sig=signal.SIGKILL)
