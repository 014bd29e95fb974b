"""End-to-end processing latency: the sliding window (core/e2e.py) and where nsqd reports it in /stats."""

from __future__ import annotations

import time

import pytest

from nsqd_py.client.protocol import mpub_body
from nsqd_py.core import e2e
from nsqd_py.core.e2e import SAMPLE_CAP, E2ELatency, merged_result
from tests.support import FRAME_MESSAGE, Message, RawConn, wait_until

SECOND = 1_000_000_000


class _Clock:
    """Stands in for time.monotonic_ns / time.time_ns inside core/e2e.py."""

    def __init__(self) -> None:
        self.now = 1_000 * SECOND

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(e2e.time, "monotonic_ns", fake)
    monkeypatch.setattr(e2e.time, "time_ns", fake)
    return fake


def _fin(window: E2ELatency, clock: _Clock, latency_ns: int) -> None:
    window.insert(clock.now - latency_ns)


def test_exact_quantiles_below_the_cap(clock: _Clock) -> None:
    window = E2ELatency(10 * SECOND)
    for ms in range(1, 101):
        _fin(window, clock, ms * 1_000_000)
    count, values = window.result([1.0, 0.99, 0.5])
    assert count == 100
    assert values == [(1.0, 100e6), (0.99, 99e6), (0.5, 50e6)]
    assert E2ELatency(SECOND).result([0.5]) == (0, [(0.5, 0.0)])


def test_window_halves_expire(clock: _Clock) -> None:
    """Samples stay for at least half a window and at most a whole one."""
    window = E2ELatency(10 * SECOND)
    _fin(window, clock, 7)
    clock.now += 5 * SECOND  # exactly half a window: nothing moves yet
    _fin(window, clock, 9)
    assert window.result([1.0])[0] == 2
    clock.now += 1
    _fin(window, clock, 11)  # the other half became current: both samples so far are in the older half
    assert window.result([1.0]) == (3, [(1.0, 11.0)])
    clock.now += 5 * SECOND  # the first half (7 and 9) is cleared for reuse
    assert window.result([1.0, 0.1]) == (1, [(1.0, 11.0), (0.1, 11.0)])
    clock.now += 60 * SECOND
    assert window.result([1.0]) == (0, [(1.0, 0.0)])


def test_reservoir_keeps_weights(clock: _Clock) -> None:
    """Past the cap a half samples uniformly; merged with a small half, each keeps its share of the count."""
    big, small = E2ELatency(10 * SECOND), E2ELatency(10 * SECOND)
    for _ in range(SAMPLE_CAP * 4):
        _fin(big, clock, 1000)
    for _ in range(SAMPLE_CAP // 4):
        _fin(small, clock, 5000)
    count, values = merged_result([big, small], [0.5, 0.95, 1.0])
    assert count == SAMPLE_CAP * 4 + SAMPLE_CAP // 4
    # 1/17 of the FINs (more than 5 %) took 5000 ns, though they are 1/5 of the samples kept
    assert values == [(0.5, 1000.0), (0.95, 5000.0), (1.0, 5000.0)]
    assert merged_result([big, small], [0.9])[1] == [(0.9, 1000.0)]


def test_stats_report_channel_and_topic_latency(nsqd_factory) -> None:
    nsqd = nsqd_factory("--e2e-processing-latency-percentile=0.5,1.0", "--e2e-processing-latency-window-time=1m")
    consumer = RawConn(nsqd.tcp_port)
    consumer.identify()
    consumer.sub("lat", "done")
    idle = RawConn(nsqd.tcp_port)
    idle.identify()
    idle.sub("lat", "idle")  # gets messages but never FINs them
    publisher = RawConn(nsqd.tcp_port)
    publisher.send("MPUB lat", mpub_body([b"m"] * 4))
    assert publisher.frame() == (0, b"OK")
    consumer.send("RDY 4")
    received = []
    while len(received) < 4:
        ftype, data = consumer.frame()
        assert ftype == FRAME_MESSAGE
        received.append(Message.parse(data))
    time.sleep(0.3)
    for msg in received:
        consumer.send(b"FIN " + msg.id)

    def finished() -> int:
        (topic,) = nsqd.stats(topic="lat")["topics"]
        return topic["channels"][0]["e2e_processing_latency"]["count"]

    wait_until(lambda: finished() == 4, timeout=10)
    (topic,) = nsqd.stats(topic="lat")["topics"]
    done, idle_row = topic["channels"]
    assert done["e2e_processing_latency"]["count"] == 4
    quantiles = done["e2e_processing_latency"]["percentiles"]
    assert [q["quantile"] for q in quantiles] == [1, 0.5]  # nsqd keeps the flag's values sorted high to low
    assert all(0.3e9 <= q["value"] < 10e9 for q in quantiles)
    assert idle_row["e2e_processing_latency"] == {"count": 0, "percentiles": [{"quantile": 1, "value": 0},
                                                                              {"quantile": 0.5, "value": 0}]}
    assert topic["e2e_processing_latency"]["count"] == 4
    assert topic["e2e_processing_latency"]["percentiles"][0]["value"] == quantiles[0]["value"]
    # a `channel=` filter hides the channel row, not its samples from the topic's merged window
    (filtered,) = nsqd.stats(topic="lat", channel="idle")["topics"]
    assert filtered["e2e_processing_latency"]["count"] == 4
    for conn in (consumer, idle, publisher):
        conn.close()
