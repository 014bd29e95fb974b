"""Topology-aware delivery as nsqd master has it (issue 45 item 6), against the real nsqd: the same zone first,
then the same region, then anyone, with master's counters in /stats."""

from __future__ import annotations

import pytest

from tests.support import NsqdProcess, channel_stats, unique, wait_until

pytestmark = pytest.mark.process
TOPOLOGY = ("--enable-experiment=topology-aware-consumption", "--topology-zone=z1", "--topology-region=r1")


def _consumer(nsqd: NsqdProcess, topic: str, zone: str, region: str):
    conn = nsqd.connect()
    assert conn.identify(topology_zone=zone, topology_region=region)["topology_zone"] == zone
    conn.sub(topic, "c")
    conn.send("RDY 100")
    return conn


def _publish(nsqd: NsqdProcess, topic: str, count: int) -> None:
    for i in range(count):
        assert nsqd.request("POST", f"/pub?topic={topic}", f"m{i}".encode()).status == 200


def _counts(nsqd: NsqdProcess, topic: str) -> dict:
    row = channel_stats(nsqd, topic, "c")
    return {k: row[k] for k in ("zone_local_msg_count", "region_local_msg_count", "global_msg_count") if k in row}


def test_nearest_ready_consumer_first(nsqd_factory) -> None:
    nsqd = nsqd_factory(*TOPOLOGY)
    topic = unique("topology")
    nsqd.request("POST", f"/topic/create?topic={topic}")
    nsqd.request("POST", f"/channel/create?topic={topic}&channel=c")
    far = _consumer(nsqd, topic, "z9", "r9")
    region = _consumer(nsqd, topic, "z2", "r1")
    zone = _consumer(nsqd, topic, "z1", "r1")
    wait_until(lambda: channel_stats(nsqd, topic, "c")["client_count"] == 3)
    _publish(nsqd, topic, 5)
    assert [zone.message().body for _ in range(5)] == [f"m{i}".encode() for i in range(5)]
    assert _counts(nsqd, topic) == {"zone_local_msg_count": 5}
    zone.send("RDY 0")
    wait_until(lambda: next(c for c in channel_stats(nsqd, topic, "c")["clients"]
                            if c["topology_zone"] == "z1")["ready_count"] == 0)
    _publish(nsqd, topic, 3)
    assert len([region.message() for _ in range(3)]) == 3
    region.send("RDY 0")
    wait_until(lambda: next(c for c in channel_stats(nsqd, topic, "c")["clients"]
                            if c["topology_zone"] == "z2")["ready_count"] == 0)
    _publish(nsqd, topic, 2)
    assert len([far.message() for _ in range(2)]) == 2
    assert _counts(nsqd, topic) == {"zone_local_msg_count": 5, "region_local_msg_count": 3, "global_msg_count": 2}


def test_without_the_experiment_no_counters(nsqd_factory) -> None:
    nsqd = nsqd_factory("--topology-zone=z1")
    topic = unique("notopology")
    nsqd.request("POST", f"/topic/create?topic={topic}")
    nsqd.request("POST", f"/channel/create?topic={topic}&channel=c")
    conn = nsqd.connect()
    conn.identify()
    conn.sub(topic, "c")
    conn.send("RDY 1")
    _publish(nsqd, topic, 1)
    conn.message()
    assert _counts(nsqd, topic) == {}
