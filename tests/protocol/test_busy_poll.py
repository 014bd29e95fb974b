"""NSQD_PY_BUSY_POLL_US: after answers go out, the loop polls without sleeping for a moment (issue 47).

What a client sees is the same with the window open, shut (0) or at its longest; an nsqd left idle after traffic
stops polling (the window closes), so it spends no CPU.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from nsqd_py.runtime.busy_poll import BUSY_POLL_ENV, DEFAULT_BUSY_POLL_US, MAX_BUSY_POLL_US, busy_poll_seconds
from tests.support import FRAME_RESPONSE, NSQD_BIN, NsqdProcess, channel_stats, unique, wait_until

pytestmark = pytest.mark.process


def test_the_window_is_read_from_the_environment() -> None:
    assert busy_poll_seconds({}) == DEFAULT_BUSY_POLL_US / 1e6
    assert busy_poll_seconds({BUSY_POLL_ENV: "0"}) == 0
    assert busy_poll_seconds({BUSY_POLL_ENV: " 120 "}) == pytest.approx(120e-6)
    assert busy_poll_seconds({BUSY_POLL_ENV: str(MAX_BUSY_POLL_US)}) == pytest.approx(MAX_BUSY_POLL_US / 1e6)
    for bad in ("-1", str(MAX_BUSY_POLL_US + 1), "50us", "1.5"):
        with pytest.raises(ValueError, match=BUSY_POLL_ENV):
            busy_poll_seconds({BUSY_POLL_ENV: bad})


def test_a_bad_window_stops_start_up_with_a_reason(tmp_path: Path) -> None:
    result = subprocess.run([str(NSQD_BIN), f"--data-path={tmp_path}", "--tcp-address=127.0.0.1:0",
                             "--http-address=127.0.0.1:0"], env={**os.environ, BUSY_POLL_ENV: "fast"},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert f"FATAL: failed to instantiate nsqd - {BUSY_POLL_ENV} must be a whole number of microseconds, not fast" \
        in result.stderr


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("window_us", ["0", str(DEFAULT_BUSY_POLL_US), str(MAX_BUSY_POLL_US)])
def test_rdy_1_round_trips_then_an_idle_nsqd_spends_no_cpu(window_us: str, nsqd_factory,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUSY_POLL_ENV, window_us)
    nsqd: NsqdProcess = nsqd_factory()
    topic = unique("busy")
    bodies = [f"m{i}".encode() for i in range(300)]
    producer = nsqd.connect()
    consumer = nsqd.connect()
    consumer.identify(output_buffer_timeout=-1)
    assert consumer.sub(topic, "ch") == (FRAME_RESPONSE, b"OK")
    consumer.send("RDY 1")
    received = []
    for body in bodies:  # one PUB and its OK, then the message at RDY 1 and its FIN: a round trip each
        producer.send(f"PUB {topic}", body)
        assert producer.frame() == (FRAME_RESPONSE, b"OK")
        msg = consumer.message()
        received.append(msg.body)
        consumer.send(b"FIN " + msg.id)
    assert received == bodies
    wait_until(lambda: channel_stats(nsqd, topic, "ch")["in_flight_count"] == 0, what="every FIN taken")
    assert nsqd.proc is not None
    before = _cpu_seconds(nsqd.proc.pid)
    time.sleep(2)
    idle_cpu = _cpu_seconds(nsqd.proc.pid) - before
    assert idle_cpu < 0.3, f"nsqd spent {idle_cpu:.2f} s of CPU in 2 s with nothing to do: the window never closed"
    stats = channel_stats(nsqd, topic, "ch")
    assert (stats["message_count"], stats["depth"], stats["requeue_count"]) == (len(bodies), 0, 0)
