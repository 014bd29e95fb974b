"""Output buffering and back-pressure over raw sockets: buffered flushes, RDY-driven flushes, slow consumers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, closing

from nsqd_py.client.protocol import mpub_body
from tests.protocol.raw import pub, raw_subscriber, recv_message, tiny_window_conn
from tests.support import FRAME_MESSAGE, FRAME_RESPONSE, Message, NsqdProcess, RawConn, wait_until


def published_at(port: int, topic: str, body: bytes, cleanup: ExitStack) -> float:
    """PUB from a fresh connection; the monotonic time the OK came back."""
    publisher = cleanup.enter_context(closing(RawConn(port)))
    pub(publisher, topic, body)
    return time.monotonic()


def delivery_delay(nsqd: NsqdProcess, topic: str, cleanup: ExitStack, rdy: int, output_buffer_timeout: int) -> float:
    """Seconds from a PUB's OK to the message reaching a subscriber with this RDY and buffer timeout (ms)."""
    sub = cleanup.enter_context(closing(raw_subscriber(nsqd.tcp_port, topic, "ch", rdy=rdy,
                                                       output_buffer_timeout=output_buffer_timeout)))
    sent = published_at(nsqd.tcp_port, topic, b"timed", cleanup)
    assert recv_message(sub, timeout=5).body == b"timed"
    return time.monotonic() - sent


def test_buffered_message_flushed_after_output_buffer_timeout(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                              name: Callable[[str], str]) -> None:
    """output_buffer_timeout 1000 and RDY 100: the client stays ready after one message, so that message
    sits in the buffer until the timeout (~1 s), not sent at once."""
    elapsed = delivery_delay(shared_nsqd, name("fc_buffered"), cleanup, rdy=100, output_buffer_timeout=1000)
    assert 0.6 <= elapsed <= 3.0, f"buffered message arrived after {elapsed:.3f}s, output_buffer_timeout is 1 s"


def test_message_flushed_at_once_when_client_stops_being_ready(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                               name: Callable[[str], str]) -> None:
    """A 5 s buffer timeout but RDY 1: after one message the client is not ready → immediate flush."""
    elapsed = delivery_delay(shared_nsqd, name("fc_rdy1"), cleanup, rdy=1, output_buffer_timeout=5000)
    assert elapsed < 2.0, f"RDY 1 message took {elapsed:.3f}s; the buffer must be flushed when RDY is used up"


def test_full_output_buffer_is_flushed_at_once(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                               name: Callable[[str], str]) -> None:
    """output_buffer_size 64 with a 5 s timeout and RDY 100: a message bigger than the buffer goes out at once."""
    topic = name("fc_full")
    sub = raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=100, output_buffer_timeout=5000,
                         output_buffer_size=64)
    cleanup.callback(sub.close)
    sent = published_at(shared_nsqd.tcp_port, topic, b"B" * 200, cleanup)
    msg = recv_message(sub, timeout=5)
    elapsed = time.monotonic() - sent
    assert msg.body == b"B" * 200
    assert elapsed < 2.0, f"a message larger than the output buffer took {elapsed:.3f}s"


def test_output_buffer_timeout_disabled_sends_at_once(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                      name: Callable[[str], str]) -> None:
    """output_buffer_timeout -1 (no timed flush, i.e. unbuffered) with RDY 100: the message is sent at once."""
    topic = name("fc_nobuf")
    sub = raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=100, output_buffer_timeout=-1)
    cleanup.callback(sub.close)
    sent = published_at(shared_nsqd.tcp_port, topic, b"x", cleanup)
    msg = recv_message(sub, timeout=5)
    assert msg.body == b"x"
    assert time.monotonic() - sent < 0.5


def test_response_frame_flushes_buffered_messages(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                  name: Callable[[str], str]) -> None:
    """A buffered message frame goes out together with (before) the next response frame on that connection."""
    topic = name("fc_resp")
    sub = raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=100, output_buffer_timeout=5000)
    cleanup.callback(sub.close)
    published_at(shared_nsqd.tcp_port, topic, b"queued", cleanup)
    # in flight = already in the subscriber's output buffer, where the 5 s timeout holds it
    wait_until(lambda: shared_nsqd.stats(topic=topic)["topics"][0]["channels"][0]["in_flight_count"] == 1)
    sub.send(f"PUB {name('fc_other')}", b"y")  # its OK must flush the buffered message first
    sub.sock.settimeout(2)
    first = sub.frame()
    assert first[0] == FRAME_MESSAGE and Message.parse(first[1]).body == b"queued"
    assert sub.frame() == (FRAME_RESPONSE, b"OK")


def test_heartbeat_flushes_buffered_messages(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                             name: Callable[[str], str]) -> None:
    """output_buffer_timeout 5000 but heartbeat_interval 1000: the heartbeat frame flushes the buffered message,
    so it arrives (just before the heartbeat) long before the 5 s buffer timeout."""
    topic = name("fc_hbflush")
    sub = raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=100, output_buffer_timeout=5000,
                         heartbeat_interval=1000)
    cleanup.callback(sub.close)
    sent = published_at(shared_nsqd.tcp_port, topic, b"carried", cleanup)
    sub.sock.settimeout(4)
    first = sub.frame(skip_heartbeats=False)
    assert first[0] == FRAME_MESSAGE and Message.parse(first[1]).body == b"carried"
    assert time.monotonic() - sent < 2.5, "the buffered message waited for the 5 s timeout, not the heartbeat"
    assert sub.frame(skip_heartbeats=False) == (FRAME_RESPONSE, b"_heartbeat_")


def test_slow_consumer_does_not_block_publisher_or_other_channel(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                                 name: Callable[[str], str]) -> None:
    """A consumer with RDY 2500 that never reads its socket; 20,000 x 1 KB are published without stalling and
    the consumer of another channel gets every one of them."""
    slow, received = run_slow_and_fast(shared_nsqd.tcp_port, name("fc_slow"), 20_000, 1024, cleanup)
    assert sorted(received) == [f"{i:08d}".encode() for i in range(20_000)]
    # What the slow consumer was sent is intact once it finally reads.
    slow.sock.settimeout(10)
    for _ in range(50):
        m = slow.message()
        assert len(m.body) == 1024 and m.body.endswith(b"k" * 1016)


def test_consumer_blocking_the_servers_writes_does_not_stall_others(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                                    name: Callable[[str], str]) -> None:
    """64 KiB messages: the stalled consumer's share (RDY 2500) is far beyond what kernel buffers hold (tiny
    receive window), so the server's writes to it really block; publishing and the other channel carry on."""
    slow, received = run_slow_and_fast(shared_nsqd.tcp_port, name("fc_block"), 400, 65536, cleanup)
    assert sorted(received) == [f"{i:08d}".encode() for i in range(400)]
    slow.sock.settimeout(10)
    m = slow.message()
    assert len(m.body) == 65536


def run_slow_and_fast(port: int, topic: str, total: int, size: int, cleanup: ExitStack) -> tuple[RawConn, list[bytes]]:
    """Subscribe a never-reading consumer (channel "slow", RDY 2500, tiny receive window) and a reading one
    (channel "fast", FINs in batches, in a thread); MPUB ``total`` bodies of ``size`` bytes; return the slow
    connection and the 8-byte sequence prefixes the fast consumer got."""
    slow = cleanup.enter_context(closing(tiny_window_conn(port)))
    assert slow.sub(topic, "slow") == (FRAME_RESPONSE, b"OK")
    slow.send("RDY 2500")
    fast = cleanup.enter_context(closing(raw_subscriber(port, topic, "fast", rdy=2500)))
    fast.sock.settimeout(20)

    received: list[bytes] = []
    failure: list[BaseException] = []

    def consume() -> None:
        pending: list[str] = []
        try:
            while len(received) < total:
                m = fast.message()
                received.append(m.body[:8])
                pending.append(f"FIN {m.id.decode()}\n")
                if len(pending) >= 100:
                    fast.send_raw("".join(pending).encode())
                    pending.clear()
            if pending:
                fast.send_raw("".join(pending).encode())
        except BaseException as exc:
            failure.append(exc)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    publisher = RawConn(port, timeout=15)  # a stalled publisher shows up as a timeout here
    cleanup.callback(publisher.close)
    batch = max(1, min(500, 4_000_000 // size))
    for start in range(0, total, batch):
        bodies = [f"{i:08d}".encode() + b"k" * (size - 8) for i in range(start, min(total, start + batch))]
        publisher.send(f"MPUB {topic}", mpub_body(bodies))
        assert publisher.frame() == (FRAME_RESPONSE, b"OK"), f"MPUB at {start} failed"
    reader.join(60)
    assert not failure, failure
    assert not reader.is_alive(), f"the fast channel got only {len(received)}/{total}"
    return slow, received
