"""Delivery semantics seen by real clients: fan-out, sharing, CLS, in-flight messages of a vanished consumer."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, closing

from nsqd_py.client.protocol import mpub_body
from tests.clients.util import GnsqCollector, IOLoopThread, PynsqReader, gnsq_producer, pause, settle
from tests.protocol.raw import pub, publish, raw_subscriber, recv_message
from tests.support import FRAME_ERROR, FRAME_RESPONSE, NsqdProcess, RawConn, channel_stats, wait_until


def test_two_gnsq_consumers_share_a_channel(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                            name: Callable[[str], str]) -> None:
    """Two consumers of one channel: every message reaches exactly one of them, and both get some."""
    topic = name("d_share")
    a = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "work", max_in_flight=3)))
    b = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "work", max_in_flight=3)))
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    bodies = [f"w{i}".encode() for i in range(300)]
    for body in bodies:
        producer.publish(topic, body)
    wait_until(lambda: len(a.received) + len(b.received) >= 300, timeout=15, what="300 deliveries")
    assert settle(lambda: len(a.received) + len(b.received), quiet=0.5) == 300
    assert Counter(a.bodies + b.bodies) == Counter(bodies)
    assert a.received and b.received, f"a={len(a.received)} b={len(b.received)}"


def test_two_channels_each_get_everything(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                          name: Callable[[str], str]) -> None:
    """Two channels of one topic (gnsq on one, pynsq on the other) both receive every message."""
    topic = name("d_fanout")
    g = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "one", max_in_flight=50)))
    p = cleanup.enter_context(closing(PynsqReader(io, shared_nsqd.tcp_address, topic, "two", max_in_flight=50)))
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    bodies = [f"f{i}".encode() for i in range(500)]
    producer.multipublish(topic, bodies[:250])
    for body in bodies[250:]:
        producer.publish(topic, body)
    wait_until(lambda: len(g.received) >= 500 and len(p.received) >= 500, timeout=15, what="500 on both channels")
    assert Counter(g.bodies) == Counter(bodies)
    assert Counter(p.bodies) == Counter(bodies)
    assert {r.id for r in g.received} == {r.id for r in p.received}, "each channel gets a copy with the same id"


def test_disconnected_consumers_in_flight_go_to_another_after_timeout(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                                      name: Callable[[str], str]) -> None:
    """A consumer (msg_timeout 1 s) vanishes holding 5 messages; they reach another consumer only after the
    timeout (not at once), with attempts 2."""
    topic = name("d_vanish")
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    producer.multipublish(topic, [f"v{i}".encode() for i in range(5)])
    delivered_at = time.monotonic()  # no later than the deliveries, so their timeouts end >= 1 s after it
    doomed = raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=5, msg_timeout=1000)
    held = [recv_message(doomed) for _ in range(5)]
    doomed.close()

    other = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch", max_in_flight=10)))
    wait_until(lambda: len(other.received) >= 5, timeout=10, what="redelivery to the other consumer")
    first = min(r.at for r in other.received)
    assert first - delivered_at >= 0.9, f"redelivered {first - delivered_at:.3f}s after delivery (msg_timeout 1 s)"
    assert sorted((r.id, r.body, r.attempts) for r in other.received) == \
        sorted((m.id, m.body, 2) for m in held)


def test_cls_close_wait_then_no_deliveries_but_fin_accepted(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                            name: Callable[[str], str]) -> None:
    """CLS → CLOSE_WAIT; afterwards RDY is ignored and nothing is delivered, but FIN of in-flight works and
    later messages go to the channel's other consumer."""
    topic = name("d_cls")
    leaving = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=2)))
    publisher = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    publisher.send(f"MPUB {topic}", mpub_body([b"a", b"b"]))
    assert publisher.frame() == (FRAME_RESPONSE, b"OK")
    in_flight = [recv_message(leaving), recv_message(leaving)]

    leaving.send("CLS")
    assert leaving.frame() == (FRAME_RESPONSE, b"CLOSE_WAIT")
    leaving.send("RDY 10")  # ignored while closing

    other = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch")))
    for body in (b"c", b"d", b"e"):
        pub(publisher, topic, body)
    wait_until(lambda: sorted(other.bodies) == [b"c", b"d", b"e"], what="later messages at the other consumer")

    for m in in_flight:
        leaving.send(f"FIN {m.id.decode()}")
    leaving.send("FIN 0000000000000000")  # never delivered: the only frame we expect back is this error
    assert leaving.frame() == (FRAME_ERROR, b"E_FIN_FAILED FIN 0000000000000000 failed ID not in flight")
    leaving.send(f"PUB {topic}", b"f")  # a reply proves every FIN above was processed without error
    assert leaving.frame() == (FRAME_RESPONSE, b"OK")
    wait_until(lambda: b"f" in other.bodies, what="the message published by the closing connection")
    pause(1.0)
    assert not leaving.is_closed(wait=0.2), "the server must not close the socket after CLS"
    assert leaving.buf == b"", "no message may reach a connection after CLOSE_WAIT"
    assert sorted(other.bodies) == [b"c", b"d", b"e", b"f"], "FINished messages must not be redelivered"


def test_pynsq_reader_close_stops_deliveries(shared_nsqd: NsqdProcess, io: IOLoopThread, cleanup: ExitStack,
                                             name: Callable[[str], str]) -> None:
    """After a pynsq Reader closes, messages for its channel wait for the next consumer."""
    topic = name("d_close")
    reader = PynsqReader(io, shared_nsqd.tcp_address, topic, "ch")
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    producer.publish(topic, b"one")
    wait_until(lambda: reader.bodies == [b"one"], what="first message")
    reader.close()
    wait_until(lambda: not reader.connected(), what="reader to disconnect")
    producer.publish(topic, b"two")
    pause(0.3)
    assert reader.bodies == [b"one"]
    later = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch")))
    wait_until(lambda: later.bodies == [b"two"], what="queued message for the next consumer")


def test_ephemeral_channel_forgets_messages_when_last_consumer_leaves(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                                      name: Callable[[str], str]) -> None:
    """An #ephemeral channel is deleted with its last consumer: a new consumer of that name sees only new messages,
    while a normal channel of the same topic keeps everything."""
    topic = name("d_eph")
    keep = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "keep")))
    eph = GnsqCollector(shared_nsqd.tcp_address, topic, "tmp#ephemeral")
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    producer.publish(topic, b"m1")
    wait_until(lambda: eph.bodies == [b"m1"] and keep.bodies == [b"m1"], what="m1 on both channels")
    eph.close()
    pause(0.3)
    producer.publish(topic, b"m2")
    wait_until(lambda: keep.bodies == [b"m1", b"m2"], what="m2 on the durable channel")
    again = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "tmp#ephemeral")))
    producer.publish(topic, b"m3")
    wait_until(lambda: b"m3" in again.bodies, what="m3 on the new ephemeral channel")
    pause(0.3)
    assert again.bodies == [b"m3"], "the re-created ephemeral channel must not hold messages from before"
    assert sorted(keep.bodies) == [b"m1", b"m2", b"m3"]


def test_ten_consumers_exactly_once(shared_nsqd: NsqdProcess, cleanup: ExitStack, name: Callable[[str], str]) -> None:
    """Ten gnsq consumers on one channel, 2000 messages: no message lost or duplicated across them."""
    topic = name("d_ten")
    consumers = []
    for _ in range(10):
        c = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch", max_in_flight=10)))
        consumers.append(c)
    producer = cleanup.enter_context(closing(gnsq_producer(shared_nsqd.tcp_address)))
    bodies = [f"t{i}".encode() for i in range(2000)]
    for i in range(0, 2000, 100):
        producer.multipublish(topic, bodies[i:i + 100])

    def total() -> int:
        return sum(len(c.received) for c in consumers)

    wait_until(lambda: total() >= 2000, timeout=20, what="2000 deliveries")
    assert settle(total, quiet=0.5) == 2000
    assert Counter(b for c in consumers for b in c.bodies) == Counter(bodies)
    assert sum(1 for c in consumers if c.received) >= 2, "deliveries should spread over several consumers"


def test_dpub_to_topic_without_channels_counts_from_hand_off(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                             name: Callable[[str], str]) -> None:
    """DPUB 1000 to a topic with no channel yet: the topic holds it; the delay runs from when the first channel
    takes it (SUB), not from the publish."""
    topic = name("d_dpub_nochan")
    publisher = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    publisher.send(f"DPUB {topic} 1000", b"held")
    assert publisher.frame() == (FRAME_RESPONSE, b"OK")
    pause(0.6)
    subscribed = time.monotonic()  # no later than the channel's creation, when the 1 s deferral starts
    consumer = cleanup.enter_context(closing(GnsqCollector(shared_nsqd.tcp_address, topic, "ch")))
    r = wait_until(lambda: consumer.received and consumer.received[0], timeout=10, what="the deferred message")
    assert r.body == b"held"
    assert r.at - subscribed >= 0.9, f"delivered {r.at - subscribed:.2f}s after the channel appeared"


def drain(conn: RawConn, quiet: float = 0.6) -> list[bytes]:
    """Bodies of all messages until none arrives for ``quiet`` seconds (each one FINished)."""
    bodies: list[bytes] = []
    conn.sock.settimeout(quiet)
    while True:
        try:
            m = conn.message()
        except TimeoutError:
            return bodies
        bodies.append(m.body)
        conn.send(f"FIN {m.id.decode()}")


def test_sample_rate_99_delivers_everything(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                            name: Callable[[str], str]) -> None:
    """A message is skipped only if a random int in [0,100) is greater than the rate: 99 never skips."""
    topic = name("d_sr99")
    sub = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=2500, sample_rate=99)))
    publish(shared_nsqd.tcp_port, topic, *[b"%d" % i for i in range(2000)])
    assert len(drain(sub)) == 2000


def test_sampled_out_messages_are_dropped_for_the_channel(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                          name: Callable[[str], str]) -> None:
    """Two consumers of one channel, one with sample_rate 50: what it skips is gone, not handed to the other."""
    topic = name("d_srmix")
    sampled = raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=2500, sample_rate=50)
    cleanup.callback(sampled.close)
    full = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=2500)))
    # both RDYs in place first (with I/O workers a RDY and the PUBs reach the broker over different links)
    wait_until(lambda: [c["ready_count"] for c in channel_stats(shared_nsqd, topic, "ch")["clients"]] == [2500, 2500])
    publish(shared_nsqd.tcp_port, topic, *[b"%d" % i for i in range(2000)])
    got_sampled, got_full = drain(sampled), drain(full)
    assert got_sampled, "the sampled consumer should get part of the stream"
    assert len(set(got_sampled + got_full)) == len(got_sampled) + len(got_full), "duplicates"
    assert len(got_sampled) + len(got_full) <= 1950, \
        f"{len(got_sampled)} + {len(got_full)}: skipped messages must be dropped, not redelivered"
