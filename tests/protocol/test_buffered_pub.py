"""A PUB whose line, size and body arrive together (what a publisher waiting for each OK sends) is read in one pass,
not by the command parser: each must still get what the parser gives it, in order with the commands around it, and
a consumer's refill after its FINs must not wait behind it."""

from __future__ import annotations

import struct
from collections.abc import Callable
from contextlib import ExitStack, closing

from tests.protocol.raw import raw_subscriber, recv_message
from tests.support import FRAME_ERROR, FRAME_RESPONSE, NsqdProcess, RawConn


def _pub(topic: bytes, body: bytes) -> bytes:
    return b"PUB " + topic + b"\n" + struct.pack(">i", len(body)) + body


def _depth(nsqd: NsqdProcess, topic: str) -> int:
    return nsqd.stats(topic=topic)["topics"][0]["depth"]


def test_a_run_of_pubs_in_one_write_is_answered_in_order(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                         name: Callable[[str], str]) -> None:
    topic = name("bufpub_run")
    other = name("bufpub_other")
    conn = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    conn.send_raw(_pub(topic.encode(), b"a") + b"NOP\n" + _pub(other.encode(), b"b") + _pub(topic.encode(), b"c")
                  + b"PUB " + topic.encode() + b"\r\n" + struct.pack(">i", 1) + b"d")
    assert [conn.frame() for _ in range(4)] == [(FRAME_RESPONSE, b"OK")] * 4
    assert (_depth(shared_nsqd, topic), _depth(shared_nsqd, other)) == (3, 1)


def test_a_body_that_arrives_later_is_still_read(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                 name: Callable[[str], str]) -> None:
    topic = name("bufpub_split")
    conn = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    data = _pub(topic.encode(), b"x" * 100)
    conn.send_raw(data[:30])
    conn.send_raw(data[30:])
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    assert _depth(shared_nsqd, topic) == 1


def test_a_bad_topic_or_size_gets_the_parsers_answer(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                     name: Callable[[str], str]) -> None:
    topic = name("bufpub_bad").encode()
    for data, error in [
        (_pub(b"bad/topic", b"x"), b'E_BAD_TOPIC PUB topic name "bad/topic" is not valid'),
        (_pub(b"t" * 65, b"x"), b'E_BAD_TOPIC PUB topic name "' + b"t" * 65 + b'" is not valid'),
        (b"PUB " + topic + b"\n" + struct.pack(">i", 0), b"E_BAD_MESSAGE PUB invalid message body size 0"),
        (b"PUB " + topic + b"\n" + struct.pack(">i", -5), b"E_BAD_MESSAGE PUB invalid message body size -5"),
        (b"PUB " + topic + b"\n" + struct.pack(">i", 1048577) + b"x" * 64,
         b"E_BAD_MESSAGE PUB message too big 1048577 > 1048576"),
    ]:
        with closing(RawConn(shared_nsqd.tcp_port)) as conn:
            conn.send_raw(_pub(topic, b"ok") + data)
            assert conn.frame() == (FRAME_RESPONSE, b"OK")
            assert conn.frame() == (FRAME_ERROR, error)
            assert conn.is_closed()


def test_the_refill_after_a_fin_does_not_wait_for_the_next_command(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                                   name: Callable[[str], str]) -> None:
    """At RDY 1, a FIN followed in the same write by a PUB, or by a command refused without closing the connection,
    still gets the next message at once: the consumer sends nothing more until it has it."""
    topic = name("bufpub_refill")
    publisher = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    for i in range(3):
        publisher.send_raw(_pub(topic.encode(), b"m%d" % i))
        assert publisher.frame() == (FRAME_RESPONSE, b"OK")
    sub = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=1)))
    first = recv_message(sub)
    sub.send_raw(b"FIN " + first.id + b"\n" + _pub(topic.encode(), b"m3"))
    assert sub.frame() == (FRAME_RESPONSE, b"OK")
    second = recv_message(sub, timeout=2)
    unknown = b"0123456789abcdef"
    sub.send_raw(b"FIN " + second.id + b"\nTOUCH " + unknown + b"\n")
    assert sub.frame() == (FRAME_ERROR, b"E_TOUCH_FAILED TOUCH " + unknown + b" failed ID not in flight")
    assert recv_message(sub, timeout=2).body == b"m2"
