"""GET /metrics: Prometheus text from the stats snapshot, read back with prometheus_client's parser."""

from __future__ import annotations

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.protocol.raw import publish, raw_subscriber
from tests.support import FRAME_MESSAGE, Message, wait_until


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    resp = requests.get(f"{url}/metrics", timeout=5)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(resp.text) for s in family.samples}


def test_metrics_follow_the_stats(nsqd_factory) -> None:
    nsqd = nsqd_factory("--e2e-processing-latency-percentile=0.99")
    consumer = raw_subscriber(nsqd.tcp_port, "prom", "c", user_agent="metrics-test")
    publish(nsqd.tcp_port, "prom", b"x", b"yy", b"zzz")
    consumer.send("RDY 1")
    ftype, data = consumer.frame()
    assert ftype == FRAME_MESSAGE
    consumer.send(b"FIN " + Message.parse(data).id)
    consumer.send("RDY 0")
    wait_until(lambda: nsqd.stats(topic="prom")["topics"][0]["channels"][0]["e2e_processing_latency"]["count"] == 1)
    requests.post(f"{nsqd.http_url}/topic/create", params={"topic": "empty"}, timeout=5)

    samples = _samples(nsqd.http_url)
    topic = (("topic", "prom"),)
    channel = (("channel", "c"), ("topic", "prom"))
    assert samples[("nsq_healthy", ())] == 1
    assert samples[("nsq_info", (("version", "1.3.0"),))] == 1
    assert samples[("nsq_topics", ())] == 2
    assert samples[("nsq_topic_messages_total", topic)] == 3
    assert samples[("nsq_topic_message_bytes_total", topic)] == 6
    assert samples[("nsq_topic_depth", (("topic", "empty"),))] == 0
    assert samples[("nsq_channel_messages_total", channel)] == 3
    assert samples[("nsq_channel_clients", channel)] == 1
    assert samples[("nsq_channel_depth", channel)] + samples[("nsq_channel_in_flight", channel)] == 2
    assert samples[("nsq_channel_requeued_total", channel)] == 0
    assert samples[("nsq_channel_timed_out_total", channel)] == 0
    assert samples[("nsq_channel_paused", channel)] == 0
    assert samples[("nsq_channel_e2e_processing_latency_count", channel)] == 1
    p99 = (("channel", "c"), ("quantile", "0.99"), ("topic", "prom"))
    assert 0 < samples[("nsq_channel_e2e_processing_latency_seconds", p99)] < 10
    assert samples[("nsq_topic_e2e_processing_latency_count", topic)] == 1
    assert ("nsq_topic_e2e_processing_latency_count", (("topic", "empty"),)) not in samples  # no channels yet
    assert ("process_resident_memory_bytes", ()) in samples

    requests.post(f"{nsqd.http_url}/channel/pause", params={"topic": "prom", "channel": "c"}, timeout=5)
    assert _samples(nsqd.http_url)[("nsq_channel_paused", channel)] == 1
    consumer.close()


def test_metrics_without_e2e(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    requests.post(f"{nsqd.http_url}/topic/create", params={"topic": "plain"}, timeout=5)
    names = {name for name, _ in _samples(nsqd.http_url)}
    assert "nsq_topic_depth" in names
    assert not [name for name in names if "e2e" in name]
