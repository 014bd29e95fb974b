"""Publish with one client library, consume with the other (pynsq ⇄ gnsq), through the real nsqd."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, closing

from tests.clients.util import GnsqCollector, IOLoopThread, PynsqReader, PynsqWriter, gnsq_producer, settle
from tests.support import NsqdProcess, wait_until


def bodies_for(prefix: str) -> list[bytes]:
    """Text, binary (every byte value, NUL, newlines), empty-looking and large bodies."""
    return ([f"{prefix}-{i}".encode() for i in range(200)]
            + [bytes(range(256)), b"\n", b" ", b"\r\n\r\n", os.urandom(64 * 1024), b"z" * 1_048_576])


def test_pynsq_writer_to_gnsq_consumer(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                       name: Callable[[str], str]) -> None:
    """pynsq pub + mpub + dpub → gnsq Consumer: exact bodies, exact count."""
    topic = name("x_py2g")
    consumer = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch", max_in_flight=20)))
    writer = cleanup.enter_context(closing(PynsqWriter(io, shared_nsqd.tcp_address)))
    singles = bodies_for("py")
    for body in singles:
        assert writer.pub(topic, body) == b"OK"
    batch = [f"py-mpub-{i}".encode() for i in range(100)]
    assert writer.mpub(topic, batch) == b"OK"
    assert writer.dpub(topic, 200, b"py-deferred") == b"OK"
    expected = Counter(singles + batch + [b"py-deferred"])
    wait_until(lambda: len(consumer.received) >= sum(expected.values()), timeout=15, what="all messages")
    assert Counter(consumer.bodies) == expected
    assert settle(lambda: len(consumer.received), quiet=0.5) == sum(expected.values())


def test_gnsq_producer_to_pynsq_reader(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                       name: Callable[[str], str]) -> None:
    """gnsq publish + multipublish + deferred publish → pynsq Reader: exact bodies, exact count."""
    topic = name("x_g2py")
    reader = cleanup.enter_context(closing(PynsqReader(io, shared_nsqd.tcp_address, topic, "ch", max_in_flight=20)))
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    singles = bodies_for("g")
    for body in singles:
        assert producer.publish(topic, body) == b"OK"
    batch = [f"g-mpub-{i}".encode() for i in range(100)]
    assert producer.multipublish(topic, batch) == b"OK"
    assert producer.publish(topic, b"g-deferred", defer=200) == b"OK"
    expected = Counter(singles + batch + [b"g-deferred"])
    wait_until(lambda: len(reader.received) >= sum(expected.values()), timeout=15, what="all messages")
    assert Counter(reader.bodies) == expected
    assert settle(lambda: len(reader.received), quiet=0.5) == sum(expected.values())
    assert reader.errors == []


def test_mixed_consumers_share_a_channel(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                         name: Callable[[str], str]) -> None:
    """A pynsq Reader and a gnsq Consumer on one channel: each message goes to exactly one; both get some."""
    topic = name("x_share")
    reader = cleanup.enter_context(closing(PynsqReader(io, shared_nsqd.tcp_address, topic, "shared", max_in_flight=5)))
    consumer = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "shared", max_in_flight=5)))
    writer = cleanup.enter_context(closing(PynsqWriter(io, shared_nsqd.tcp_address)))
    bodies = [f"s{i}".encode() for i in range(400)]
    for i in range(0, 400, 50):
        writer.mpub(topic, bodies[i:i + 50])
    wait_until(lambda: len(reader.received) + len(consumer.received) >= 400, timeout=15, what="400 deliveries")
    assert settle(lambda: len(reader.received) + len(consumer.received), quiet=0.5) == 400
    assert Counter(reader.bodies + consumer.bodies) == Counter(bodies), "duplicated or lost messages"
    assert reader.received and consumer.received, (len(reader.received), len(consumer.received))


def test_large_mpub_gnsq_to_pynsq(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                  name: Callable[[str], str]) -> None:
    """gnsq MPUB of 4 random 1 MiB bodies (a ~4 MiB command) reaches a pynsq Reader intact."""
    topic = name("x_big")
    reader = cleanup.enter_context(closing(PynsqReader(io, shared_nsqd.tcp_address, topic, "ch", max_in_flight=4)))
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    bodies = [os.urandom(1_048_576) for _ in range(4)]
    assert producer.multipublish(topic, bodies) == b"OK"
    wait_until(lambda: len(reader.received) >= 4, timeout=15, what="4 large messages")
    assert sorted(reader.bodies) == sorted(bodies)
