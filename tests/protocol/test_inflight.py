"""In-flight bookkeeping over raw sockets: RDY windows, ownership, TOUCH cap, REQ clamping, late responses."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack, closing

from nsqd_py.client.protocol import mpub_body
from tests.clients.util import NsqdFactory
from tests.protocol.raw import delivered, nothing_arrives, publish, raw_subscriber, recv_message, settled_ok
from tests.support import FRAME_ERROR, FRAME_RESPONSE, NsqdProcess, RawConn, wait_until


def test_rdy_zero_pauses_and_rdy_resumes(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                         name: Callable[[str], str]) -> None:
    """RDY 0 (what client libraries send to back off) stops deliveries; RDY 1 resumes them."""
    topic = name("if_rdy0")
    sub = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=1)))
    publisher = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    publisher.send(f"MPUB {topic}", mpub_body([b"1", b"2", b"3"]))
    assert publisher.frame() == (FRAME_RESPONSE, b"OK")
    first = recv_message(sub)
    sub.send("RDY 0")
    sub.send(f"FIN {first.id.decode()}")
    assert nothing_arrives(sub, 0.7), "a message was delivered with RDY 0"
    sub.send("RDY 1")
    second = recv_message(sub)
    assert second.body in (b"2", b"3")


def test_lowering_rdy_below_in_flight_holds_deliveries(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                       name: Callable[[str], str]) -> None:
    """RDY 3 with 3 in flight, then RDY 1: nothing more arrives until in-flight drops below 1."""
    topic = name("if_shrink")
    sub = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=3)))
    publisher = cleanup.enter_context(closing(RawConn(shared_nsqd.tcp_port)))
    publisher.send(f"MPUB {topic}", mpub_body([f"m{i}".encode() for i in range(6)]))
    assert publisher.frame() == (FRAME_RESPONSE, b"OK")
    held = [recv_message(sub) for _ in range(3)]
    sub.send("RDY 1")
    sub.send(f"FIN {held[0].id.decode()}")
    sub.send(f"FIN {held[1].id.decode()}")
    assert nothing_arrives(sub, 0.7), "delivered while in_flight (1) >= RDY (1)"
    sub.send(f"FIN {held[2].id.decode()}")
    nxt = recv_message(sub)
    assert nxt.body.startswith(b"m")
    assert nothing_arrives(sub, 0.5), "RDY 1 allows only one message in flight"


def test_fin_of_another_consumers_message(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                          name: Callable[[str], str]) -> None:
    """FIN by a different consumer of the same channel is a non-fatal E_FIN_FAILED (does not own message)."""
    topic = name("if_owner")
    owner, msg = delivered(shared_nsqd.tcp_port, topic, b"mine", cleanup)
    thief = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=0)))
    thief.send(f"FIN {msg.id.decode()}")
    assert thief.frame() == (FRAME_ERROR, f"E_FIN_FAILED FIN {msg.id.decode()} failed client does not own message"
                             .encode())
    settled_ok(thief, name("if_probe"))
    owner.send(f"FIN {msg.id.decode()}")
    settled_ok(owner, name("if_probe"))


def test_touch_cannot_extend_past_max_msg_timeout(nsqd_factory: NsqdFactory, cleanup: ExitStack) -> None:
    """--max-msg-timeout 2s: TOUCHing every 300 ms cannot keep a message beyond delivery + 2 s."""
    nsqd = nsqd_factory("--max-msg-timeout=2s")
    sub = cleanup.enter_context(closing(raw_subscriber(nsqd.tcp_port, "capped", "ch", rdy=1, msg_timeout=1000)))
    delivered = time.monotonic()  # no later than the delivery, where the 2 s cap starts
    publish(nsqd.tcp_port, "capped", b"t")
    msg = recv_message(sub)
    sub.sock.settimeout(0.3)
    redelivered = None
    while time.monotonic() - delivered < 6:
        sub.send(f"TOUCH {msg.id.decode()}")
        try:
            ftype, data = sub.frame()
        except TimeoutError:
            continue
        if ftype == FRAME_ERROR:
            assert data.startswith(b"E_TOUCH_FAILED"), data
            continue
        redelivered = time.monotonic() - delivered
        break
    assert redelivered is not None, "TOUCH extended the message beyond --max-msg-timeout"
    assert 1.8 <= redelivered <= 4, f"redelivered after {redelivered:.2f}s; cap is 2 s"


def test_touch_and_fin_after_timeout_fail_softly(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                 name: Callable[[str], str]) -> None:
    """Once a message timed out (and was not redelivered: RDY 0), TOUCH/FIN/REQ give non-fatal *_FAILED errors."""
    topic = name("if_late")
    sub = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=1, msg_timeout=1000)))
    publish(shared_nsqd.tcp_port, topic, b"slow")
    msg = recv_message(sub)
    sub.send("RDY 0")

    def timed_out() -> bool:
        (channel,) = shared_nsqd.stats(topic=topic)["topics"][0]["channels"]
        return channel["timeout_count"] == 1 and channel["in_flight_count"] == 0

    wait_until(timed_out, timeout=10)  # back in the queue, not in flight
    mid = msg.id.decode()
    sub.sock.settimeout(5)
    sub.send(f"TOUCH {mid}")
    assert sub.frame() == (FRAME_ERROR, f"E_TOUCH_FAILED TOUCH {mid} failed ID not in flight".encode())
    sub.send(f"FIN {mid}")
    assert sub.frame() == (FRAME_ERROR, f"E_FIN_FAILED FIN {mid} failed ID not in flight".encode())
    sub.send(f"REQ {mid} 0")
    assert sub.frame() == (FRAME_ERROR, f"E_REQ_FAILED REQ {mid} failed ID not in flight".encode())
    sub.send("RDY 1")
    again = recv_message(sub)
    assert (again.id, again.attempts) == (msg.id, 2)


def test_timed_out_message_redelivered_to_same_consumer_can_be_finished(shared_nsqd: NsqdProcess,
                                                                         cleanup: ExitStack,
                                                                         name: Callable[[str], str]) -> None:
    """The redelivery after a timeout is a new in-flight entry: FIN of it succeeds, nothing else comes back."""
    topic = name("if_redo")
    sub = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=1, msg_timeout=1000)))
    publish(shared_nsqd.tcp_port, topic, b"twice")
    first = recv_message(sub)
    second = recv_message(sub, timeout=8)
    assert (second.id, second.attempts) == (first.id, 2)
    sub.send(f"FIN {second.id.decode()}")
    settled_ok(sub, name("if_probe"))
    assert nothing_arrives(sub, 1.2), "a FINished message came back"
