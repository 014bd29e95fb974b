"""REQ on the wire: the timeout clamped to --max-req-timeout, redelivery with its attempts, a deferral that
outlives its consumer. (REQ's error rows are in test_errors.py, the core's requeue in unit/test_core.py.)"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack, closing

from nsqd_py.go.durations import SECOND
from tests.inprocess import InProcessFactory
from tests.protocol.raw import delivered, nothing_arrives, publish, raw_subscriber, recv_message, settled_ok
from tests.support import NsqdProcess


def test_req_clamps_timeout_and_redelivers_with_attempts(inproc_factory: InProcessFactory) -> None:
    proc = inproc_factory(max_req_timeout=SECOND)
    consumer = proc.subscriber("t_req")
    proc.publish("t_req", b"r")
    msg = consumer.message()
    start = time.monotonic()
    consumer.send(b"REQ " + msg.id + b" 999999")  # clamped to 1 s, not an error
    again = consumer.message()
    waited = time.monotonic() - start
    assert again.id == msg.id and again.attempts == 2
    assert 0.8 < waited < 5
    assert "REQ timeout 999999000000 out of range 0-1000000000. Setting to 1000000000" in proc.log()


def test_req_timeout_is_clamped_not_rejected(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                             name: Callable[[str], str]) -> None:
    """REQ with a delay above --max-req-timeout (10m here) is accepted silently (clamped)."""
    topic = name("if_clamp")
    sub, msg = delivered(shared_nsqd.tcp_port, topic, b"far future", cleanup)
    sub.send(f"REQ {msg.id.decode()} 999999999")
    settled_ok(sub, name("if_probe"))
    assert nothing_arrives(sub, 0.5)


def test_requeued_with_delay_survives_its_consumer(shared_nsqd: NsqdProcess, cleanup: ExitStack,
                                                   name: Callable[[str], str]) -> None:
    """REQ 1000 then disconnect: the deferred message still reaches the next consumer after the delay."""
    topic = name("if_reqgone")
    first = raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=1)
    publish(shared_nsqd.tcp_port, topic, b"deferred")
    msg = recv_message(first)
    requeued = time.monotonic()  # before nsqd starts the 1 s deferral
    first.send(f"REQ {msg.id.decode()} 1000")
    settled_ok(first, name("if_probe"))
    first.close()
    second = cleanup.enter_context(closing(raw_subscriber(shared_nsqd.tcp_port, topic, "ch", rdy=1)))
    again = recv_message(second, timeout=10)
    assert time.monotonic() - requeued >= 0.9
    assert (again.id, again.body, again.attempts) == (msg.id, b"deferred", 2)
