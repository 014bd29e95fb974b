"""nsqd registering with nsqlookupd: IDENTIFY, REGISTER/UNREGISTER on create/delete, reconnects, live peer
changes over PUT /config, and pre-creating a new topic's channels from lookupd."""

from __future__ import annotations

import signal

import requests

from nsqd_py.testing import free_port
from tests.cluster.conftest import LookupdFactory
from tests.cluster.util import LookupdProcess
from tests.support import NsqdProcess, RawConn, wait_until


def _post(nsqd: NsqdProcess, path: str, **params: str) -> None:
    resp = requests.post(f"{nsqd.http_url}{path}", params=params, timeout=5)
    assert resp.status_code == 200, resp.text


def _registered(lookupd: LookupdProcess, nsqd: NsqdProcess, topic: str) -> bool:
    return nsqd.tcp_port in lookupd.producer_ports(topic)


def _debug_keys(lookupd: LookupdProcess) -> set[str]:
    return set(lookupd.get("/debug").json())


def test_register_and_unregister(lookupd: LookupdProcess, cluster_nsqd) -> None:
    nsqd = cluster_nsqd(lookupd)
    wait_until(lambda: lookupd.get("/nodes").json()["producers"])
    (node,) = lookupd.get("/nodes").json()["producers"]
    assert (node["broadcast_address"], node["tcp_port"], node["http_port"], node["version"]) == (
        "127.0.0.1", nsqd.tcp_port, nsqd.http_port, "1.3.0")
    log = nsqd.log()
    assert f"LOOKUP({lookupd.tcp_address}): adding peer" in log
    assert f"LOOKUP connecting to {lookupd.tcp_address}" in log
    assert (f"LOOKUPD({lookupd.tcp_address}): peer info {{TCPPort:{lookupd.tcp_port} "
            f"HTTPPort:{lookupd.http_port} Version:1.3.0 BroadcastAddress:127.0.0.1}}") in log

    _post(nsqd, "/topic/create", topic="reg")
    wait_until(lambda: _registered(lookupd, nsqd, "reg"))
    _post(nsqd, "/channel/create", topic="reg", channel="c1")
    wait_until(lambda: "channel:reg:c1" in _debug_keys(lookupd))
    _post(nsqd, "/channel/delete", topic="reg", channel="c1")
    wait_until(lambda: "channel:reg:c1" not in _debug_keys(lookupd))
    assert _registered(lookupd, nsqd, "reg")
    _post(nsqd, "/topic/delete", topic="reg")
    wait_until(lambda: not _registered(lookupd, nsqd, "reg"))
    assert "topic:reg:" not in _debug_keys(lookupd)
    assert f"LOOKUPD({lookupd.tcp_address}): topic UNREGISTER reg" in nsqd.log()


def test_ephemeral_topic_goes_away_with_its_last_consumer(lookupd: LookupdProcess, cluster_nsqd) -> None:
    nsqd = cluster_nsqd(lookupd)
    conn = RawConn(nsqd.tcp_port)
    conn.identify()
    conn.sub("eph#ephemeral", "c#ephemeral")
    wait_until(lambda: lookupd.channels("eph#ephemeral") == ["c#ephemeral"])
    conn.close()
    wait_until(lambda: lookupd.get("/lookup", topic="eph#ephemeral").status_code == 404)
    assert lookupd.channels("eph#ephemeral") == []


def test_killed_nsqd_leaves_lookup(lookupd_factory: LookupdFactory, cluster_nsqd) -> None:
    lookupd = lookupd_factory("--inactive-producer-timeout=2s")
    first, second = cluster_nsqd(lookupd), cluster_nsqd(lookupd)
    for nsqd in (first, second):
        _post(nsqd, "/topic/create", topic="kill")
    # 30 s: two nsqds registering under the suite's full load (four workers beside Spark's JVMs) once took over 10
    wait_until(lambda: lookupd.producer_ports("kill") == {first.tcp_port, second.tcp_port}, timeout=30)
    first.stop(sig=signal.SIGKILL)
    wait_until(lambda: lookupd.producer_ports("kill") == {second.tcp_port}, timeout=5)
    assert [n["tcp_port"] for n in lookupd.get("/nodes").json()["producers"]] == [second.tcp_port]


def test_lookupd_started_after_nsqd_gets_everything(lookupd_factory: LookupdFactory, cluster_nsqd) -> None:
    """nsqd retries a lookupd that is down, then IDENTIFYs and REGISTERs what it has (no channels: the
    topic; else each channel); the same again after lookupd restarts."""
    lookupd = lookupd_factory(start=False)
    nsqd = cluster_nsqd(lookupd)
    _post(nsqd, "/topic/create", topic="early")
    _post(nsqd, "/channel/create", topic="early", channel="ch")
    _post(nsqd, "/topic/create", topic="bare")
    lookupd.start()
    wait_until(lambda: _registered(lookupd, nsqd, "early") and _registered(lookupd, nsqd, "bare"), timeout=10)
    assert lookupd.channels("early") == ["ch"]
    assert nsqd.log().count(f"LOOKUP connecting to {lookupd.tcp_address}") >= 2

    lookupd.stop()
    restarted = lookupd_factory(tcp_port=lookupd.tcp_port)
    wait_until(lambda: _registered(restarted, nsqd, "early") and restarted.channels("early") == ["ch"], timeout=10)


def test_put_config_lookupd_addresses(lookupd_factory: LookupdFactory, cluster_nsqd) -> None:
    old, new = lookupd_factory(), lookupd_factory()
    nsqd = cluster_nsqd(old)
    _post(nsqd, "/topic/create", topic="moving")
    wait_until(lambda: _registered(old, nsqd, "moving"))
    resp = requests.put(f"{nsqd.http_url}/config/nsqlookupd_tcp_addresses", json=[new.tcp_address], timeout=5)
    assert resp.json() == [new.tcp_address]
    wait_until(lambda: _registered(new, nsqd, "moving"))
    wait_until(lambda: not _registered(old, nsqd, "moving"))
    assert f"LOOKUP({old.tcp_address}): removing peer" in nsqd.log()
    resp = requests.put(f"{nsqd.http_url}/config/nsqlookupd_tcp_addresses", json=[], timeout=5)
    assert resp.json() == []
    wait_until(lambda: not _registered(new, nsqd, "moving"))


def test_new_topic_gets_lookupd_channels_first(lookupd: LookupdProcess, cluster_nsqd) -> None:
    """Channels lookupd knows for a topic exist on a new nsqd before its first message (ephemeral ones not)."""
    lookupd.post("/channel/create", topic="pre", channel="archive")
    lookupd.post("/channel/create", topic="pre", channel="tmp#ephemeral")
    nsqd = cluster_nsqd(lookupd)
    wait_until(lambda: lookupd.get("/nodes").json()["producers"])
    conn = RawConn(nsqd.tcp_port)
    conn.send("PUB pre", b"first")
    conn.frame()
    conn.close()
    (topic,) = nsqd.stats(topic="pre")["topics"]
    assert [(c["channel_name"], c["message_count"]) for c in topic["channels"]] == [("archive", 1)]
    assert "CI: querying nsqlookupd http://127.0.0.1:" in nsqd.log()


def test_unreachable_lookupd_is_logged_not_fatal(nsqd_factory) -> None:
    address = f"127.0.0.1:{free_port()}"
    nsqd = nsqd_factory(f"--lookupd-tcp-address={address}")
    _post(nsqd, "/topic/create", topic="alone")
    wait_until(lambda: f"LOOKUPD({address}): REGISTER alone - dial tcp {address}: connect: connection refused"
             in nsqd.log())
    assert "no available nsqlookupd to query for channels to pre-create for topic alone" in nsqd.log()
