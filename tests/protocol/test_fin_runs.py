"""A run of FINs in one write (what consumers that settle in bulk send) is parsed in one pass: each FIN must still
get what the line-by-line parser gives it - the error of one does not stop the rest, and a line that is not a plain
`FIN <16-byte id>\\n` gets the answer it gets alone."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack, closing

from nsqd_py.client.protocol import Message, mpub_body
from tests.protocol.raw import nothing_arrives, raw_subscriber, recv_message
from tests.support import FRAME_ERROR, FRAME_RESPONSE, NsqdProcess, RawConn, wait_until


def _held(nsqd: NsqdProcess, cleanup: ExitStack, topic: str, count: int) -> tuple[RawConn, list[Message]]:
    sub = cleanup.enter_context(closing(raw_subscriber(nsqd.tcp_port, topic, "ch", rdy=count)))
    publisher = cleanup.enter_context(closing(RawConn(nsqd.tcp_port)))
    publisher.send(f"MPUB {topic}", mpub_body([f"m{i}".encode() for i in range(count)]))
    assert publisher.frame() == (FRAME_RESPONSE, b"OK")
    return sub, [recv_message(sub) for _ in range(count)]


def _channel(nsqd: NsqdProcess, topic: str) -> dict:
    (channel,) = nsqd.stats(topic=topic)["topics"][0]["channels"]
    return channel


def test_run_with_an_unknown_id_finishes_the_others(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                      name: Callable[[str], str]) -> None:
    topic = name("finrun_unknown")
    sub, held = _held(shared_nsqd, cleanup, topic, 12)
    unknown = b"0123456789abcdef"
    lines = [b"FIN " + m.id + b"\n" for m in held]
    lines.insert(5, b"FIN " + unknown + b"\n")
    sub.send_raw(b"".join(lines))
    assert sub.frame() == (FRAME_ERROR, b"E_FIN_FAILED FIN " + unknown + b" failed ID not in flight")
    wait_until(lambda: _channel(shared_nsqd, topic)["in_flight_count"] == 0, timeout=5)
    channel = _channel(shared_nsqd, topic)
    assert (channel["depth"], channel["requeue_count"], channel["timeout_count"]) == (0, 0, 0)
    assert nothing_arrives(sub, 0.3)


def test_crlf_and_a_split_line_finish_too(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                           name: Callable[[str], str]) -> None:
    """`FIN id\\r\\n` is a FIN as well; a run whose last line is cut in two by the network finishes all of them."""
    topic = name("finrun_crlf")
    sub, held = _held(shared_nsqd, cleanup, topic, 6)
    data = b"FIN " + held[0].id + b"\r\n" + b"".join(b"FIN " + m.id + b"\n" for m in held[1:])
    sub.send_raw(data[:-9])
    assert nothing_arrives(sub, 0.2)
    sub.send_raw(data[-9:])
    wait_until(lambda: _channel(shared_nsqd, topic)["in_flight_count"] == 0, timeout=5)
    assert nothing_arrives(sub, 0.3), "an error for a well-formed FIN"


def test_a_malformed_id_in_a_run_is_fatal_where_it_stands(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                            name: Callable[[str], str]) -> None:
    """A 16-byte field with a space in it is two parameters, not an id: E_INVALID closes the connection after
    the FINs before it, and the messages from it on are not finished (they stay in flight until they time out)."""
    topic = name("finrun_bad")
    sub, held = _held(shared_nsqd, cleanup, topic, 4)
    bad = b"FIN " + held[2].id[:6] + b" " + held[2].id[7:] + b"\n"
    sub.send_raw(b"FIN " + held[0].id + b"\n" + b"FIN " + held[1].id + b"\n" + bad + b"FIN " + held[3].id + b"\n")
    assert sub.frame() == (FRAME_ERROR, b"E_INVALID invalid message ID")
    wait_until(lambda: not _channel(shared_nsqd, topic)["clients"], timeout=5)
    channel = _channel(shared_nsqd, topic)
    assert (channel["in_flight_count"], channel["depth"], channel["message_count"]) == (2, 0, 4)
