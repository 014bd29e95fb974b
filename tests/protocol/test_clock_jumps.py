"""The wall clock jumps an hour forward or back under a running nsqd (issue 39): message timeouts and deferred
messages run on the monotonic clock, as Go's do, so neither fires early nor an hour late; so do statsd's interval
and the e2e latency window's halves. An e2e latency is the wall clock's now minus the message's (wall clock)
timestamp, as in Go, so only a message published before the jump and finished after it carries the jump.

The jump comes from Debian's libfaketime (`make faketime-deps`), preloaded, reading its offset from a file the test
rewrites; the monotonic clock is left alone, as a real clock step (NTP, a VM resume) leaves it."""

from __future__ import annotations

import contextlib
import email.utils
import glob
import socket
import time
from pathlib import Path

import pytest

from tests.support import FRAME_MESSAGE, FRAME_RESPONSE, NsqdProcess, RawConn, request, unique

FAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), "")

pytestmark = [pytest.mark.process,
              pytest.mark.skipif(not FAKETIME, reason="needs libfaketime (make faketime-deps installs Debian's)")]


class JumpingNsqd(NsqdProcess):
    """An nsqd whose wall clock is the host's plus the offset written in ``offset_file``."""

    def __init__(self, data_path: Path, offset_file: Path, *flags: str) -> None:
        super().__init__(data_path, *flags)
        self.offset_file = offset_file
        offset_file.write_text("+0\n")

    def command(self) -> list[str]:
        return ["env", f"LD_PRELOAD={FAKETIME}", f"FAKETIME_TIMESTAMP_FILE={self.offset_file}", "FAKETIME_NO_CACHE=1",
                "FAKETIME_DONT_FAKE_MONOTONIC=1", *super().command()]

    def jump(self, offset: str) -> None:
        self.offset_file.write_text(f"{offset}\n")


@pytest.mark.parametrize("offset", ["+1h", "-1h"], ids=["forward", "back"])
def test_timeouts_and_deferred_messages_keep_their_time(offset: str, tmp_path: Path) -> None:
    nsqd = JumpingNsqd(tmp_path / "data", tmp_path / "offset")
    nsqd.start()
    try:
        topic = unique("clock")
        consumer = RawConn(nsqd.tcp_port, timeout=20)
        consumer.identify(msg_timeout=2000, output_buffer_timeout=-1)
        assert consumer.sub(topic, "c") == (FRAME_RESPONSE, b"OK")
        consumer.send("RDY 5")
        producer = nsqd.connect()
        producer.send(f"DPUB {topic} 3000", b"deferred")
        assert producer.frame() == (FRAME_RESPONSE, b"OK")
        producer.send(f"PUB {topic}", b"left in flight")
        assert producer.frame() == (FRAME_RESPONSE, b"OK")
        first = consumer.message()
        assert (first.body, first.attempts) == (b"left in flight", 1)
        started = time.monotonic()
        nsqd.jump(offset)
        date = request(nsqd.http_port, "GET", "/ping").header("Date")
        assert date is not None
        seconds_off = email.utils.parsedate_to_datetime(date).timestamp() - time.time()
        assert abs(seconds_off - (3600 if offset == "+1h" else -3600)) < 60, f"nsqd's clock is {seconds_off:.0f} s off"
        arrivals = []
        while len(arrivals) < 2:
            ftype, data = consumer.frame()
            assert ftype == FRAME_MESSAGE
            arrivals.append((data[26:], int.from_bytes(data[8:10], "big"), time.monotonic() - started))
        by_body = {body: (attempts, after) for body, attempts, after in arrivals}
        # redelivered once its 2 s msg_timeout passed, the deferred one once its 3 s passed: neither at the jump
        # (a forward jump fires everything at once) nor an hour on (a backward one holds everything)
        assert by_body[b"left in flight"][0] == 2 and by_body[b"left in flight"][1] > 1.0
        assert by_body[b"deferred"][0] == 1 and by_body[b"deferred"][1] > 2.0
        assert nsqd.stop() == 0
        assert "Traceback" not in nsqd.log()
    finally:
        nsqd.stop()


@pytest.mark.parametrize("offset", ["+1h", "-1h"], ids=["forward", "back"])
def test_statsd_and_e2e_latency_keep_their_time(offset: str, tmp_path: Path) -> None:
    statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    statsd.bind(("127.0.0.1", 0))
    statsd.settimeout(5)
    nsqd = JumpingNsqd(tmp_path / "data", tmp_path / "offset", f"--statsd-address=127.0.0.1:{statsd.getsockname()[1]}",
                       "--statsd-interval=1s", "--e2e-processing-latency-percentile=1.0")
    nsqd.start()
    try:
        topic = unique("clock")
        statsd.recv(65536)  # statsd pushes
        nsqd.jump(offset)
        consumer = RawConn(nsqd.tcp_port, timeout=20)
        assert consumer.sub(topic, "c") == (FRAME_RESPONSE, b"OK")
        consumer.send("RDY 1")
        producer = nsqd.connect()
        producer.send(f"PUB {topic}", b"after the jump")
        assert producer.frame() == (FRAME_RESPONSE, b"OK")
        consumer.send(b"FIN " + consumer.message().id)
        [found] = nsqd.stats(topic=topic)["topics"]
        [latency] = found["channels"][0]["e2e_processing_latency"]["percentiles"]
        assert 0 <= latency["value"] < 10e9, f"e2e latency {latency['value'] / 1e9:.0f} s"
        # statsd goes on pushing every second: a wall clock interval would stall an hour after a jump back
        started, pushes = time.monotonic(), 0
        while time.monotonic() - started < 3.5:
            with contextlib.suppress(TimeoutError):
                statsd.settimeout(max(0.1, 3.5 - (time.monotonic() - started)))
                pushes += b".message_count:" in statsd.recv(65536)
        assert pushes >= 2, f"{pushes} statsd pushes in 3.5 s at --statsd-interval=1s"
        assert nsqd.stop() == 0
        assert "Traceback" not in nsqd.log()
    finally:
        nsqd.stop()
        statsd.close()
