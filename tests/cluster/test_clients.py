"""Third-party consumers that find nsqd nodes through nsqlookupd: pynsq's Reader and gnsq's Consumer."""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack

import gnsq
import nsq
import requests

from nsqd_py.client.protocol import mpub_body
from tests.clients.util import IOLoopThread, settle
from tests.cluster.util import LookupdProcess
from tests.support import NsqdProcess, RawConn, wait_until


def _publish(nsqd: NsqdProcess, topic: str, bodies: list[bytes]) -> None:
    conn = RawConn(nsqd.tcp_port)
    conn.send(f"MPUB {topic}", mpub_body(bodies))
    assert conn.frame() == (0, b"OK")
    conn.close()


def _channels(nsqd: NsqdProcess) -> list[str]:
    topics = nsqd.stats(topic="spread")["topics"] or [{"channels": []}]
    return [c["channel_name"] for c in topics[0]["channels"] if c["client_count"]]


def test_readers_find_both_nsqds_through_lookupd(lookupd: LookupdProcess, cluster_nsqd, io: IOLoopThread,
                                                 cleanup: ExitStack) -> None:
    """Everything published to either nsqd reaches a pynsq Reader and a gnsq Consumer that only know lookupd."""
    nodes = [cluster_nsqd(lookupd), cluster_nsqd(lookupd)]
    for nsqd in nodes:
        requests.post(f"{nsqd.http_url}/topic/create", params={"topic": "spread"}, timeout=5)
    wait_until(lambda: len(lookupd.producers("spread")) == 2, what="both nsqd registered")

    py_got: list[bytes] = []

    def handle(message: nsq.Message) -> bool:
        py_got.append(message.body)
        return True

    reader = io.call(lambda: nsq.Reader(topic="spread", channel="py", message_handler=handle,
                                        lookupd_http_addresses=[lookupd.http_url], lookupd_poll_interval=1,
                                        max_in_flight=10))
    cleanup.callback(lambda: io.call(reader.close))

    g_got: list[bytes] = []
    consumer = gnsq.Consumer("spread", "g", lookupd_http_addresses=[lookupd.http_url], lookupd_poll_interval=1,
                             max_in_flight=10)
    consumer.on_message.connect(lambda _c, message: g_got.append(message.body), weak=False)
    consumer.start(block=False)
    cleanup.callback(lambda: (consumer.close(), consumer.join(timeout=5)))

    # a channel only gets messages published after it exists: wait for both consumers on both nodes
    wait_until(lambda: all(_channels(nsqd) == ["g", "py"] for nsqd in nodes), timeout=15, what="subscriptions")
    expected = []
    for i, nsqd in enumerate(nodes):
        bodies = [f"n{i}-{j}".encode() for j in range(20)]
        _publish(nsqd, "spread", bodies)
        expected += bodies
    wait_until(lambda: len(py_got) >= len(expected) and len(g_got) >= len(expected), what="every message")
    assert settle(lambda: len(py_got) + len(g_got), quiet=0.5) == 2 * len(expected)
    assert Counter(py_got) == Counter(expected)
    assert Counter(g_got) == Counter(expected)
