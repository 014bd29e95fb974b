"""pynsq 0.9.1 (tornado) Writer and Reader against the real nsqd: RDY windows, REQ, TOUCH, timeouts, DPUB, MPUB."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, closing
from typing import Any

from tests.clients.util import IOLoopThread, NsqdFactory, PynsqReader, PynsqWriter, pause, settle
from tests.protocol.raw import publish
from tests.support import NsqdProcess, wait_until


def reader_and_writer(io: IOLoopThread, nsqd: NsqdProcess, topic: str, cleanup: ExitStack,
                      **reader_options: Any) -> tuple[PynsqReader, PynsqWriter]:
    """A pynsq Reader of ``topic``'s channel "ch" and a Writer, both closed by ``cleanup``."""
    reader = cleanup.enter_context(closing(PynsqReader(io, nsqd.tcp_address, topic, "ch", **reader_options)))
    return reader, cleanup.enter_context(closing(PynsqWriter(io, nsqd.tcp_address)))


def test_pub_then_consume_exact_bodies(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                       name: Callable[[str], str]) -> None:
    """Every PUB from the Writer reaches the Reader once, byte for byte, with attempts 1."""
    topic = name("py_pub")
    writer = cleanup.enter_context(closing(PynsqWriter(io, shared_nsqd.tcp_address)))
    bodies = [f"msg-{i}".encode() for i in range(50)] + [b"\x00\xff\n\r binary", b"x" * 100_000]
    for body in bodies:
        assert writer.pub(topic, body) == b"OK"
    reader = cleanup.enter_context(closing(PynsqReader(io, shared_nsqd.tcp_address, topic, "ch", max_in_flight=10)))
    wait_until(lambda: len(reader.received) >= len(bodies), what="all messages")
    assert Counter(reader.bodies) == Counter(bodies)
    assert {r.attempts for r in reader.received} == {1}
    assert len({r.id for r in reader.received}) == len(bodies)
    assert settle(lambda: len(reader.received), quiet=0.5) == len(bodies)
    assert reader.errors == []


def test_mpub(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack, name: Callable[[str], str]) -> None:
    """One MPUB of 200 bodies → 200 deliveries; ids are 16 lowercase hex digits, increasing in publish order."""
    topic = name("py_mpub")
    reader, writer = reader_and_writer(io, shared_nsqd, topic, cleanup, max_in_flight=100)
    bodies = [f"m{i:03d}".encode() for i in range(200)]
    assert writer.mpub(topic, bodies) == b"OK"
    wait_until(lambda: len(reader.received) >= 200, what="200 messages")
    assert sorted(reader.bodies) == bodies
    id_of = {r.body: r.id for r in reader.received}
    ids = [id_of[b] for b in bodies]
    assert all(len(i) == 16 and i == i.lower() for i in ids), ids[:3]
    as_int = [int(i, 16) for i in ids]
    assert as_int == sorted(set(as_int)), "ids must be unique and increase in MPUB order"


def test_rdy_window_of_50_over_500_messages(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                           name: Callable[[str], str]) -> None:
    """max_in_flight 50: never more than 50 unanswered deliveries; FINs open the window until all 500 arrive."""
    topic = name("py_rdy")
    writer = cleanup.enter_context(closing(PynsqWriter(io, shared_nsqd.tcp_address)))
    bodies = [f"r{i}".encode() for i in range(500)]
    assert writer.mpub(topic, bodies) == b"OK"
    reader = PynsqReader(io, shared_nsqd.tcp_address, topic, "ch", auto_finish=False, max_in_flight=50)
    cleanup.callback(reader.close)

    wait_until(lambda: len(reader.received) >= 50, what="a full window of 50")
    pause(0.5)
    assert len(reader.received) == 50, "server sent more than RDY 50 allowed"

    answered = 0
    while answered < 500:
        pending = reader.received[answered:]
        assert len(pending) <= 50, f"{len(pending)} in flight with RDY 50"
        for r in pending:
            reader.finish(r)
        answered += len(pending)
        if answered < 500:
            wait_until(lambda a=answered: len(reader.received) > a, what=f"more than {answered} messages")
    assert Counter(reader.bodies) == Counter(bodies)
    assert reader.errors == []


def test_req_with_delay_redelivers_after_delay(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                               name: Callable[[str], str]) -> None:
    """REQ 1000 ms: the message comes back no earlier than ~0.9 s later with attempts 2."""
    topic = name("py_req")
    reader, writer = reader_and_writer(io, shared_nsqd, topic, cleanup, auto_finish=False)
    writer.pub(topic, b"again")
    first = reader.delivery(1)
    assert first.attempts == 1
    sent = time.monotonic()  # before nsqd starts the 1 s deferral
    reader.requeue(first, 1000)
    second = reader.delivery(2, what="redelivery")
    assert second.at - sent >= 0.9, f"REQ 1000 redelivered after {second.at - sent:.3f}s"
    assert (second.id, second.body, second.attempts) == (first.id, b"again", 2)
    assert second.timestamp == first.timestamp, "timestamp is the original publish time"
    reader.finish(second)
    pause(0.3)
    assert reader.errors == []


def test_req_zero_redelivers_at_once(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                     name: Callable[[str], str]) -> None:
    """REQ 0 puts the message straight back into the queue; attempts count up with each delivery."""
    topic = name("py_req0")
    reader, writer = reader_and_writer(io, shared_nsqd, topic, cleanup, auto_finish=False)
    writer.pub(topic, b"bounce")
    for n in range(1, 4):
        r = reader.delivery(n, timeout=5)
        assert (r.body, r.attempts) == (b"bounce", n)
        if n < 3:
            reader.requeue(r, 0)
    reader.finish(reader.received[-1])
    pause(0.3)
    assert len(reader.received) == 3
    assert reader.errors == []


def test_touch_keeps_message_past_msg_timeout(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                              name: Callable[[str], str]) -> None:
    """msg_timeout 1 s, TOUCH every 300 ms for 2.1 s: no redelivery, and the late FIN is accepted."""
    topic = name("py_touch")
    reader = PynsqReader(io, shared_nsqd.tcp_address, topic, "ch", auto_finish=False, msg_timeout=1)
    cleanup.callback(reader.close)
    writer = cleanup.enter_context(closing(PynsqWriter(io, shared_nsqd.tcp_address)))
    writer.pub(topic, b"hold")
    r = reader.delivery(1)
    end = time.monotonic() + 2.1
    while time.monotonic() < end:
        pause(0.3)
        reader.touch(r)
    assert len(reader.received) == 1, "a TOUCHed message was redelivered"
    reader.finish(r)
    pause(1.2)  # past another msg_timeout: a FINished message must not come back either
    assert len(reader.received) == 1
    assert reader.errors == [], "TOUCH/FIN of an in-flight message must not fail"


def test_msg_timeout_redelivers_with_attempts_2(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                                name: Callable[[str], str]) -> None:
    """IDENTIFY msg_timeout 1000 ms; an unanswered message comes back after ≥ ~1 s with attempts 2."""
    topic = name("py_timeout")
    reader = PynsqReader(io, shared_nsqd.tcp_address, topic, "ch", auto_finish=False, msg_timeout=1)
    cleanup.callback(reader.close)
    writer = cleanup.enter_context(closing(PynsqWriter(io, shared_nsqd.tcp_address)))
    writer.pub(topic, b"late")
    first = reader.delivery(1)
    second = reader.delivery(2, timeout=8, what="redelivery")
    assert second.at - first.at >= 0.9, f"timed out after {second.at - first.at:.3f}s, msg_timeout is 1 s"
    assert (second.id, second.body, second.attempts) == (first.id, b"late", 2)
    reader.finish(second)
    pause(0.3)
    assert reader.errors == []


def test_dpub_arrives_after_delay(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                  name: Callable[[str], str]) -> None:
    """Writer.dpub(1000 ms): the message is not delivered before ~0.9 s; its timestamp is the publish time."""
    topic = name("py_dpub")
    reader, writer = reader_and_writer(io, shared_nsqd, topic, cleanup)
    wall = time.time()
    sent = time.monotonic()  # before nsqd starts the 1 s deferral
    assert writer.dpub(topic, 1000, b"later") == b"OK"
    r = reader.delivery(1, what="deferred delivery")
    assert r.at - sent >= 0.9, f"DPUB 1000 delivered after {r.at - sent:.3f}s"
    assert (r.body, r.attempts) == (b"later", 1)
    assert abs(r.timestamp / 1e9 - wall) < 1.0, "timestamp should be the publish time, not the delivery time"


def test_heartbeats_keep_idle_reader_connected(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                               name: Callable[[str], str]) -> None:
    """heartbeat_interval 1 s: the Reader answers heartbeats and is still connected and consuming after 3.5 s idle."""
    topic = name("py_hb")
    reader = cleanup.enter_context(closing(PynsqReader(io, shared_nsqd.tcp_address, topic, "ch", heartbeat_interval=1)))
    pause(3.5)
    assert reader.connected()
    assert reader.heartbeats >= 2, f"only {reader.heartbeats} heartbeats in 3.5 s at a 1 s interval"
    writer = cleanup.enter_context(closing(PynsqWriter(io, shared_nsqd.tcp_address)))
    writer.pub(topic, b"still here")
    wait_until(lambda: reader.bodies == [b"still here"], what="delivery after idling")
    assert reader.errors == []


def test_server_limits_reach_the_reader(nsqd_factory: NsqdFactory, io: IOLoopThread, cleanup: ExitStack) -> None:
    """--max-rdy-count=10 and --msg-timeout=1s: the Reader (max_in_flight 50) is capped at 10 in flight by the
    IDENTIFY reply, and without its own msg_timeout the server default of 1 s frees the window."""
    nsqd = nsqd_factory("--max-rdy-count=10", "--msg-timeout=1s")
    reader = PynsqReader(io, nsqd.tcp_address, "limits", "ch", auto_finish=False, max_in_flight=50)
    cleanup.callback(reader.close)
    publish(nsqd.tcp_port, "limits", *[b"%d" % i for i in range(30)])
    wait_until(lambda: len(reader.received) >= 10, what="10 deliveries")
    first = reader.received[0].at
    pause(0.5)
    assert len(reader.received) == 10, "more than --max-rdy-count messages in flight"
    wait_until(lambda: len(reader.received) > 10, timeout=5, what="the window to reopen after msg_timeout")
    assert reader.received[10].at - first >= 0.9
    assert reader.errors == []
