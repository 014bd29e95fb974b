"""Deflate negotiated by the client libraries themselves (IDENTIFY deflate=true), end to end."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, closing

import gnsq

from tests.clients.util import GnsqCollector, IOLoopThread, PynsqReader, PynsqWriter, settle
from tests.support import NsqdProcess, wait_until


def bodies(prefix: str) -> list[bytes]:
    """Compressible text, repetitive binary and 1 MiB of incompressible random bytes."""
    return [f"{prefix}-{i}".encode() * 20 for i in range(100)] + [bytes(range(256)) * 100, os.urandom(1_048_576)]


def test_pynsq_deflate_writer_and_reader(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                         name: Callable[[str], str]) -> None:
    """pynsq Writer and Reader both with deflate (level 3): exact bodies both ways through compressed streams."""
    topic = name("z_py")
    reader = PynsqReader(io, shared_nsqd.tcp_address, topic, "ch", max_in_flight=20, deflate=True, deflate_level=3,
                         heartbeat_interval=1)
    cleanup.callback(reader.close)
    writer = cleanup.enter_context(closing(PynsqWriter(io, shared_nsqd.tcp_address, deflate=True)))
    sent = bodies("py")
    for body in sent[:50]:
        assert writer.pub(topic, body) == b"OK"
    assert writer.mpub(topic, sent[50:]) == b"OK"
    wait_until(lambda: len(reader.received) >= len(sent), what="all messages")
    assert Counter(reader.bodies) == Counter(sent)
    assert settle(lambda: len(reader.received), quiet=0.5) == len(sent)
    assert reader.errors == []
    assert reader.connected()


def test_gnsq_deflate_connection_and_consumer(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                              name: Callable[[str], str]) -> None:
    """gnsq connection with deflate publishes; a deflate gnsq Consumer receives everything."""
    topic = name("z_g")
    consumer = GnsqCollector(shared_nsqd.tcp_address, topic, "ch", max_in_flight=20, deflate=True)
    cleanup.callback(consumer.close)
    conn = gnsq.NsqdTCPClient("127.0.0.1", shared_nsqd.tcp_port, deflate=True, deflate_level=6)
    conn.connect()
    cleanup.callback(conn.close_stream)
    reply = conn.identify()
    assert reply["deflate"] is True and reply["deflate_level"] == 6
    sent = bodies("g")
    for body in sent[:50]:
        conn.publish(topic, body)
        conn.check_ok()
    conn.multipublish(topic, sent[50:])
    conn.check_ok()
    wait_until(lambda: len(consumer.received) >= len(sent), what="all messages")
    assert Counter(consumer.bodies) == Counter(sent)
