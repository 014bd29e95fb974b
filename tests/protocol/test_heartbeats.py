"""Heartbeats over raw sockets (the libraries' view is in test_pynsq.py / test_gnsq.py)."""

from __future__ import annotations

import time
from contextlib import ExitStack, closing

from tests.support import FRAME_RESPONSE, NsqdProcess, RawConn


def collect_heartbeats(conn: RawConn, seconds: float) -> list[float]:
    """Read for ``seconds``, answering each ``_heartbeat_`` with NOP; return when each arrived (relative)."""
    start = time.monotonic()
    beats: list[float] = []
    while (left := seconds - (time.monotonic() - start)) > 0:
        conn.sock.settimeout(left)
        try:
            frame = conn.frame(skip_heartbeats=False)
        except TimeoutError:
            break
        assert frame == (FRAME_RESPONSE, b"_heartbeat_"), frame
        beats.append(time.monotonic() - start)
        conn.send("NOP")
    return beats


def test_negotiated_interval_applies_to_an_unsubscribed_client(shared_nsqd: NsqdProcess, cleanup: ExitStack) -> None:
    """IDENTIFY heartbeat_interval 1000 sent a moment after the magic: heartbeats every ~1 s, and a client that
    answers them with NOP stays connected."""
    conn = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    time.sleep(0.2)  # a separate packet, as most client libraries do
    assert isinstance(conn.identify(heartbeat_interval=1000), dict)
    beats = collect_heartbeats(conn, 4.0)
    assert len(beats) >= 2, f"heartbeats at {beats} within 4 s of IDENTIFY heartbeat_interval=1000"
    assert 0.5 <= beats[0] <= 2.0, beats
    assert not conn.is_closed(wait=0.2)


def test_silent_client_closed_after_two_intervals(shared_nsqd: NsqdProcess, cleanup: ExitStack) -> None:
    """A client that never answers: heartbeats go out, and the server closes the socket after ~2 intervals."""
    conn = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    assert isinstance(conn.identify(heartbeat_interval=1000), dict)
    start = time.monotonic()
    assert conn.is_closed(wait=6), "a silent client must be dropped"
    assert 1.5 <= time.monotonic() - start <= 4
    assert b"_heartbeat_" in conn.buf, "heartbeats should have been sent before the drop"
