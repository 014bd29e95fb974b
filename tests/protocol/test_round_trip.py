"""The round-trip path (issue 29) against a real nsqd: answers leave in one burst per loop turn, a slow reader gets a
large answer whole and in order without holding anyone up, the write deadline cuts off a reader that takes nothing,
the read deadline is re-armed lazily yet still cuts off an idle client as Go does, and at RDY 1 each FIN brings the
next message with no other command."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack, closing

from nsqd_py.client.protocol import mpub_body
from tests.protocol.raw import publish, raw_subscriber, tiny_window_conn
from tests.support import FRAME_MESSAGE, FRAME_RESPONSE, NsqdProcess, RawConn, channel_stats, wait_until


def test_slow_reader_gets_a_large_answer_whole_and_in_order(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                            name: Callable[[str], str]) -> None:
    """300 x 64 KiB for a consumer that reads nothing yet (tiny receive window): far more than the kernel holds,
    so most of it waits in the server. Publishers are answered meanwhile; then every message arrives intact, in
    publish order."""
    topic = name("rt_big")
    slow = cleanup.enter_context(closing(tiny_window_conn(shared_nsqd.tcp_port)))
    assert slow.sub(topic, "ch") == (FRAME_RESPONSE, b"OK")
    slow.send("RDY 2500")
    bodies = [f"{i:08d}".encode() + bytes([i % 251]) * 65528 for i in range(300)]
    for start in range(0, 300, 50):  # MPUBs under --max-body-size (5 MiB)
        publish(shared_nsqd.tcp_port, topic, *bodies[start:start + 50])
    wait_until(lambda: channel_stats(shared_nsqd, topic, "ch")["in_flight_count"] == 300)
    publisher = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    for i in range(50):
        publisher.send(f"PUB {name('rt_other')}", b"%d" % i)
        assert publisher.frame() == (FRAME_RESPONSE, b"OK")
    slow.sock.settimeout(20)
    got = []
    for _ in range(300):
        msg = slow.message()
        got.append(msg.body)
        slow.send(b"FIN " + msg.id)
    assert got == bodies
    wait_until(lambda: channel_stats(shared_nsqd, topic, "ch")["in_flight_count"] == 0)


def test_write_deadline_cuts_off_a_reader_that_takes_nothing(nsqd_factory: Callable[..., NsqdProcess],
                                                             cleanup: ExitStack) -> None:
    """Heartbeat interval 1 s is also the write deadline: a consumer that keeps sending NOPs (so its read deadline
    never passes) but reads nothing is dropped once a send has waited that long, with Go's log line."""
    nsqd = nsqd_factory()
    slow = cleanup.enter_context(closing(tiny_window_conn(nsqd.tcp_port)))
    assert isinstance(slow.identify(heartbeat_interval=1000), dict)
    assert slow.sub("wd", "ch") == (FRAME_RESPONSE, b"OK")
    slow.send("RDY 2500")
    for _ in range(2):
        publish(nsqd.tcp_port, "wd", *[b"w" * 65536] * 50)
    deadline = time.monotonic() + 10
    closed = False
    while time.monotonic() < deadline and not closed:
        time.sleep(0.3)
        try:
            slow.send("NOP")
        except OSError:
            closed = True
    wait_until(lambda: "messagePump error - i/o timeout" in nsqd.log(), timeout=5)
    assert channel_stats(nsqd, "wd", "ch")["clients"] == []


def test_read_deadline_is_pushed_on_by_each_command_and_still_cuts_off_idle_clients(
        shared_nsqd: NsqdProcess, cleanup: ExitStack) -> None:
    """Heartbeat interval 1 s: a client that sends a NOP every 0.5 s for 3 s (longer than the 2 s deadline) stays,
    since each command moves the deadline on; once silent, it is dropped two intervals after its last command."""
    conn = cleanup.enter_context(closing(shared_nsqd.connect()))
    assert isinstance(conn.identify(heartbeat_interval=1000), dict)
    for _ in range(6):
        time.sleep(0.5)
        conn.send("NOP")
    last = time.monotonic()
    conn.send("PUB rt_alive", b"still here")
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    assert conn.is_closed(wait=5.0)
    silent = time.monotonic() - last
    assert 1.8 <= silent <= 3.5, f"cut off {silent:.2f} s after the last command; the deadline is 2 s"


def test_rdy1_each_fin_brings_the_next_message(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                               name: Callable[[str], str]) -> None:
    """A backlog of 200 and RDY 1: one message at a time, the next sent in answer to the FIN of the last (the
    client sends nothing else), in publish order, and never a second one before the FIN."""
    topic = name("rt_rdy1")
    bodies = [b"m%03d" % i for i in range(200)]
    publish(shared_nsqd.tcp_port, topic, *bodies)
    sub = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=1)))
    got = []
    for _ in bodies:
        frame_type, data = sub.frame()
        assert frame_type == FRAME_MESSAGE
        assert sub.buf == b"", "a second message came before the FIN of the first"
        msg_id, body = data[10:26], data[26:]
        got.append(body)
        sub.send(b"FIN " + msg_id)
    assert got == bodies
    stats = wait_until(lambda: (s := channel_stats(shared_nsqd, topic, "ch"))["clients"][0]["finish_count"] == 200
                       and s)
    assert stats["in_flight_count"] == 0 and stats["depth"] == 0


def test_pipelined_pubs_are_answered_in_order_in_one_burst(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                           name: Callable[[str], str]) -> None:
    """100 PUBs and an MPUB in one write: 101 OKs in order (they leave together, at the end of the loop turn that
    served them), then an error for a bad topic name, which closes the connection after its frame is sent."""
    topic = name("rt_pipe")
    conn = cleanup.enter_context(closing(shared_nsqd.connect()))
    batch = b"".join(b"PUB %s\n\x00\x00\x00\x01x" % topic.encode() for _ in range(100))
    batch += b"MPUB %s\n" % topic.encode() + len(mpub_body([b"a", b"b"])).to_bytes(4, "big") + mpub_body([b"a", b"b"])
    conn.send_raw(batch + b"PUB bad!name\n")
    for _ in range(101):
        assert conn.frame() == (FRAME_RESPONSE, b"OK")
    frame_type, data = conn.frame()
    assert frame_type == 1 and data.startswith(b"E_BAD_TOPIC")
    assert conn.is_closed()
    assert shared_nsqd.stats(topic=topic)["topics"][0]["message_count"] == 102
