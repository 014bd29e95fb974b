"""statsd: the UDP lines nsqd pushes (a real socket in the test) and the pure line/packet building."""

from __future__ import annotations

import re
import socket
import time

from nsqd_py.cluster.statsd import pack, stat_lines
from tests.protocol.raw import publish, raw_subscriber

_LINE = re.compile(r"^(?P<key>[^:]+):(?P<value>-?\d+)\|(?P<kind>[cg])$")


def _receive(sock: socket.socket, seconds: float) -> list[bytes]:
    packets = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            packets.append(sock.recv(65536))
        except TimeoutError:
            break
    return packets


def test_pushes_counters_and_gauges_over_udp(nsqd_factory) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        nsqd = nsqd_factory(f"--statsd-address=127.0.0.1:{udp.getsockname()[1]}", "--statsd-interval=1s",
                            "--statsd-udp-packet-size=200", "--statsd-exclude-ephemeral",
                            "--broadcast-address=10.0.0.1", "--e2e-processing-latency-percentile=0.99,1")
        consumer = raw_subscriber(nsqd.tcp_port, "st", "c", user_agent="statsd-test")
        ephemeral = raw_subscriber(nsqd.tcp_port, "st", "e#ephemeral", user_agent="statsd-test")
        publish(nsqd.tcp_port, "st", b"a", b"bb", b"ccc")
        packets = _receive(udp, 3.5)
        for conn in (consumer, ephemeral):
            conn.close()

    assert packets and all(len(p) <= 200 for p in packets)
    lines = [line for p in packets for line in p.decode().split("\n") if line]
    assert all(p.endswith(b"\n") for p in packets)
    prefix = f"nsq.10_0_0_1_{nsqd.http_port}."
    parsed = [_LINE.match(line[len(prefix):]) for line in lines if line.startswith(prefix)]
    assert len(parsed) == len(lines) and all(parsed)
    kinds = {m["key"]: m["kind"] for m in parsed if m}
    values: dict[str, list[int]] = {}
    for m in parsed:
        if m:
            values.setdefault(m["key"], []).append(int(m["value"]))

    assert kinds["topic.st.message_count"] == "c" and sum(values["topic.st.message_count"]) == 3
    assert values["topic.st.message_count"][-1] == 0  # a counter is the change since the previous push
    assert kinds["topic.st.message_bytes"] == "c" and sum(values["topic.st.message_bytes"]) == 6
    for gauge in ("topic.st.depth", "topic.st.backend_depth", "topic.st.e2e_processing_latency_99",
                  "topic.st.e2e_processing_latency_100", "topic.st.channel.c.depth", "topic.st.channel.c.clients",
                  "topic.st.channel.c.in_flight_count", "topic.st.channel.c.deferred_count",
                  "topic.st.channel.c.backend_depth", "topic.st.channel.c.e2e_processing_latency_99",
                  "mem.heap_objects", "mem.heap_in_use_bytes", "mem.gc_pause_usec_99", "mem.next_gc_bytes"):
        assert kinds[gauge] == "g", gauge
    for counter in ("topic.st.channel.c.message_count", "topic.st.channel.c.requeue_count",
                    "topic.st.channel.c.timeout_count", "mem.gc_runs"):
        assert kinds[counter] == "c", counter
    assert values["topic.st.channel.c.clients"][-1] == 1
    assert not [key for key in kinds if "ephemeral" in key]
    assert "STATSD: pushing stats to 127.0.0.1:" in nsqd.log()


def _snapshot(count: int, ephemeral: bool = False) -> dict:
    latency = {"count": 1, "percentiles": [{"quantile": 0.95, "value": 1500.7}, {"quantile": 1, "value": 2000}]}
    channel = {"channel_name": "c#ephemeral" if ephemeral else "c", "depth": 1, "backend_depth": 0,
               "in_flight_count": 2, "deferred_count": 0, "message_count": count, "requeue_count": 1,
               "timeout_count": 0, "client_count": 3, "e2e_processing_latency": latency}
    topic = {"topic_name": "t", "channels": [channel], "depth": 4, "backend_depth": 1, "message_count": count,
             "message_bytes": 10 * count, "e2e_processing_latency": {"count": 0, "percentiles": None}}
    return {"topics": [topic]}


def test_stat_lines_deltas_and_names() -> None:
    first = stat_lines(_snapshot(5), {"topics": []}, "p.", False)
    assert first[:4] == ["p.topic.t.message_count:5|c\n", "p.topic.t.message_bytes:50|c\n", "p.topic.t.depth:4|g\n",
                         "p.topic.t.backend_depth:1|g\n"]
    assert "p.topic.t.channel.c.e2e_processing_latency_95:1500|g\n" in first
    assert "p.topic.t.channel.c.e2e_processing_latency_100:2000|g\n" in first
    assert "p.topic.t.channel.c.clients:3|g\n" in first
    second = stat_lines(_snapshot(7), _snapshot(5), "", False)
    assert "topic.t.message_count:2|c\n" in second and "topic.t.channel.c.requeue_count:0|c\n" in second
    excluded = stat_lines(_snapshot(1, ephemeral=True), {"topics": []}, "", True)
    assert not [line for line in excluded if "channel" in line]


def test_pack_keeps_lines_whole() -> None:
    lines = ["a" * 10 + "\n", "b" * 10 + "\n", "c" * 30 + "\n", "d\n"]
    assert pack(lines, 25) == [b"a" * 10 + b"\n" + b"b" * 10 + b"\n", b"c" * 30 + b"\n", b"d\n"]
    assert pack([], 508) == []
