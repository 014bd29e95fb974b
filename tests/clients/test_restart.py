"""Client libraries across an nsqd restart: in-flight messages survive the graceful stop and come back."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

from tests.clients.util import GnsqCollector, NsqdFactory
from tests.protocol.raw import publish
from tests.support import wait_until


def test_gnsq_consumer_reconnects_and_gets_in_flight_messages_back(nsqd_factory: NsqdFactory, cleanup: ExitStack,
                                                                   name: Callable[[str], str]) -> None:
    """SIGTERM with 3 messages in flight at a gnsq Consumer: after the restart (same ports and data dir) the
    consumer reconnects by itself and gets them again with attempts 2, then new messages flow."""
    nsqd = nsqd_factory()
    topic = name("rs")
    consumer = GnsqCollector(nsqd.tcp_address, topic, "ch", auto_finish=False, max_in_flight=5)
    cleanup.callback(consumer.close)
    publish(nsqd.tcp_port, topic, b"warm-up")  # gnsq keeps RDY 1 until its first FIN, then raises it to 5
    wait_until(lambda: consumer.received, what="warm-up message")[0].handle.finish()
    publish(nsqd.tcp_port, topic, b"a", b"b", b"c")
    wait_until(lambda: len(consumer.received) >= 4, what="3 more deliveries")
    before = {r.id: r.body for r in consumer.received[1:]}

    assert nsqd.stop() == 0
    nsqd.start()
    again = []
    for n in range(5, 8):  # after reconnecting gnsq is back at RDY 1, so FIN each redelivery to get the next
        r = wait_until(lambda n=n: len(consumer.received) >= n and consumer.received[n - 1], timeout=20,
                       what=f"redelivery {n - 4} after the restart")
        again.append(r)
        r.handle.finish()
    assert {r.id: r.body for r in again} == before
    assert {r.attempts for r in again} == {2}
    publish(nsqd.tcp_port, topic, b"fresh")
    wait_until(lambda: consumer.received[-1].body == b"fresh", what="a new message after the restart")
    assert len(consumer.received) == 8
