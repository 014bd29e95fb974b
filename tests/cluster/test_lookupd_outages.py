"""nsqlookupd outages while nsqd runs (issue 39): a lookupd stopped (SIGSTOP, a hung machine) or killed holds up
neither publishing nor the registrations with the other lookupd, and once it is back it has every topic and channel
again. Creating a topic asks the lookupds for its channels, as Go's nsqd does: with one hung, a create takes up to
--http-client-request-timeout."""

from __future__ import annotations

import os
import signal

import requests

from tests.cluster.conftest import LookupdFactory
from tests.support import FRAME_RESPONSE, RawConn, drain, wait_until


def _create(nsqd, topic: str, channel: str) -> None:
    for path, params in (("/topic/create", {"topic": topic}), ("/channel/create", {"topic": topic,
                                                                                  "channel": channel})):
        resp = requests.post(f"{nsqd.http_url}{path}", params=params, timeout=10)
        assert resp.status_code == 200, resp.text


def _has_all(lookupd, nsqd, topics: list[str]) -> bool:
    return all(nsqd.tcp_port in lookupd.producer_ports(t) and lookupd.channels(t) == ["ch"] for t in topics)


def test_a_stopped_lookupd_holds_up_nothing_and_catches_up(lookupd_factory: LookupdFactory, cluster_nsqd) -> None:
    hung, healthy = lookupd_factory(), lookupd_factory()
    nsqd = cluster_nsqd(hung, healthy, extra=("--http-client-connect-timeout=1s", "--http-client-request-timeout=1s"))
    _create(nsqd, "before", "ch")
    publisher = RawConn(nsqd.tcp_port)  # its 5 s timeout bounds a stall of the message path
    wait_until(lambda: _has_all(hung, nsqd, ["before"]) and _has_all(healthy, nsqd, ["before"]))
    assert hung.process is not None
    os.kill(hung.process.pid, signal.SIGSTOP)
    try:
        for _ in range(100):
            publisher.send("PUB before", b"x")
            assert publisher.frame() == (FRAME_RESPONSE, b"OK")
        assert len(drain(nsqd.tcp_port, "before", "ch")) == 100
        topics = [f"during{i}" for i in range(5)]
        for topic in topics:
            _create(nsqd, topic, "ch")
        wait_until(lambda: _has_all(healthy, nsqd, topics), timeout=15, what="the healthy lookupd's registrations")
    finally:
        os.kill(hung.process.pid, signal.SIGCONT)
    wait_until(lambda: _has_all(hung, nsqd, ["before", *topics]), timeout=30, what="the stopped lookupd catching up")
    assert "Traceback" not in nsqd.log()


def test_a_killed_lookupd_comes_back_with_everything(lookupd_factory: LookupdFactory, cluster_nsqd) -> None:
    lost, other = lookupd_factory(), lookupd_factory()
    nsqd = cluster_nsqd(lost, other)
    _create(nsqd, "a", "ch")
    wait_until(lambda: _has_all(lost, nsqd, ["a"]))
    lost.stop(sig=signal.SIGKILL)
    _create(nsqd, "b", "ch")
    wait_until(lambda: _has_all(other, nsqd, ["a", "b"]), timeout=15)
    back = lookupd_factory(tcp_port=lost.tcp_port)
    wait_until(lambda: _has_all(back, nsqd, ["a", "b"]), timeout=30)
    assert "Traceback" not in nsqd.log()
