"""gnsq 1.0.2 (gevent) Producer, Consumer and NsqdTCPClient against the real nsqd."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, closing

import gnsq
import pytest
from gnsq import protocol as gproto

from tests.clients.util import GnsqCollector, gnsq_connection, gnsq_producer, pause, settle
from tests.support import NsqdProcess, wait_until


def test_producer_publish_and_multipublish(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                           name: Callable[[str], str]) -> None:
    """Producer.publish and .multipublish are acknowledged with OK and every body is consumed exactly once."""
    topic = name("g_pub")
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    singles = [f"single-{i}".encode() for i in range(30)]
    batch = [f"batch-{i}".encode() for i in range(300)] + [b"\x00\n\xff" * 1000]
    for body in singles:
        assert producer.publish(topic, body) == b"OK"
    assert producer.multipublish(topic, batch) == b"OK"
    consumer = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch", max_in_flight=50)))
    wait_until(lambda: len(consumer.received) >= len(singles) + len(batch), what="all messages")
    assert Counter(consumer.bodies) == Counter(singles + batch)
    assert {r.attempts for r in consumer.received} == {1}
    assert settle(lambda: len(consumer.received), quiet=0.5) == len(singles) + len(batch)


def test_producer_publish_defer(shared_nsqd: NsqdProcess, cleanup: ExitStack, name: Callable[[str], str]) -> None:
    """Producer.publish(defer=1000) is delivered no earlier than ~0.9 s after the publish."""
    topic = name("g_defer")
    consumer = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch")))
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    assert producer.publish(topic, b"now") == b"OK"
    wait_until(lambda: consumer.bodies == [b"now"], what="immediate message")
    sent = time.monotonic()  # before nsqd starts the 1 s deferral
    assert producer.publish(topic, b"deferred", defer=1000) == b"OK"
    r = wait_until(lambda: len(consumer.received) > 1 and consumer.received[1], timeout=10, what="deferred message")
    assert r.body == b"deferred"
    assert r.at - sent >= 0.9, f"defer=1000 delivered after {r.at - sent:.3f}s"


def test_connection_dpublish_and_errors(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                        name: Callable[[str], str]) -> None:
    """The low-level connection: DPUB → OK and delayed; an out-of-range DPUB timeout is a fatal E_INVALID."""
    topic = name("g_dpub")
    consumer = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch")))
    conn = gnsq_connection(shared_nsqd.tcp_port)
    cleanup.callback(conn.close_stream)
    conn.publish(topic, b"d", defer=1000)
    sent = time.monotonic()
    conn.check_ok()
    r = wait_until(lambda: consumer.received and consumer.received[0], timeout=10, what="DPUB delivery")
    assert r.at - sent >= 0.9
    conn.publish(topic, b"x", defer=600_001)  # shared_nsqd runs with --max-req-timeout=10m
    frame, err = conn.read_response()
    assert frame == gproto.FRAME_TYPE_ERROR
    assert isinstance(err, gnsq.errors.NSQInvalid)
    assert err.args == (b"DPUB timeout 600001 out of range 0-600000",)
    wait_until(lambda: not conn.is_connected, timeout=5, what="fatal error to close the connection")


def test_requeue_with_delay_and_finish(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                       name: Callable[[str], str]) -> None:
    """message.requeue(1000) → back after ≥ ~0.9 s with attempts 2; message.finish() ends it."""
    topic = name("g_req")
    consumer = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch", auto_finish=False)))
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    producer.publish(topic, b"r")
    first = wait_until(lambda: consumer.received and consumer.received[0], what="delivery")
    first.handle.requeue(1000, backoff=False)
    sent = time.monotonic()
    second = wait_until(lambda: len(consumer.received) > 1 and consumer.received[1], timeout=10, what="redelivery")
    assert second.at - sent >= 0.9
    assert (second.id, second.attempts) == (first.id, 2)
    second.handle.finish()
    pause(0.5)
    assert len(consumer.received) == 2


def test_heartbeats_keep_idle_consumer_connected(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                 name: Callable[[str], str]) -> None:
    """heartbeat_interval 1 s: gnsq answers each _heartbeat_ with NOP and stays connected through 3.5 s idle."""
    topic = name("g_hb")
    beats: list[float] = []
    consumer = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch", heartbeat_interval=1)))
    consumer.consumer.on_response.connect(
        lambda sender, response: beats.append(time.monotonic()) if response == b"_heartbeat_" else None, weak=False)
    conns = list(consumer.consumer._connections)
    pause(3.5)
    assert len(beats) >= 2, f"{len(beats)} heartbeats in 3.5 s at 1 s"
    assert [c.is_connected for c in conns] == [True]
    assert list(consumer.consumer._connections) == conns, "the consumer had to reconnect"
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    producer.publish(topic, b"after idle")
    wait_until(lambda: consumer.bodies == [b"after idle"], what="delivery after idling")


@pytest.mark.parametrize("rate", [50])
def test_sample_rate(shared_nsqd: NsqdProcess, cleanup: ExitStack, name: Callable[[str], str], rate: int) -> None:
    """sample_rate 50 over 2000 messages delivers roughly half (30-70 %); an unsampled channel gets all."""
    topic = name("g_sample")
    sampled = GnsqCollector(shared_nsqd.tcp_address, topic, "sampled", sample_rate=rate, max_in_flight=200)
    cleanup.callback(sampled.close)
    full = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "full", max_in_flight=200)))
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    for i in range(0, 2000, 500):
        producer.multipublish(topic, [f"s{j}".encode() for j in range(i, i + 500)])
    wait_until(lambda: len(full.received) >= 2000, timeout=20, what="the unsampled channel to get all 2000")
    got = settle(lambda: len(sampled.received), quiet=0.6)
    assert 600 <= got <= 1400, f"sample_rate {rate} delivered {got}/2000"
    assert len(set(sampled.bodies)) == got, "sampled messages must not be duplicated"
    assert {r.attempts for r in sampled.received} == {1}
