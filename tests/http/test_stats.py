"""GET /stats: JSON shape and quirks (null versus [], filters, producers), memory numbers, the text report."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from nsqd_py.client.protocol import mpub_body
from tests.http.http_support import NsqdFactory
from tests.support import FRAME_RESPONSE, NsqdProcess, RawConn, request, wait_until

TOPIC_KEYS = ["topic_name", "channels", "depth", "backend_depth", "message_count", "message_bytes", "paused",
              "e2e_processing_latency"]
CHANNEL_KEYS = ["channel_name", "depth", "backend_depth", "in_flight_count", "deferred_count", "message_count",
                "requeue_count", "timeout_count", "client_count", "clients", "paused", "e2e_processing_latency"]
CLIENT_KEYS = ["client_id", "hostname", "version", "remote_address", "state", "ready_count", "in_flight_count",
               "message_count", "finish_count", "requeue_count", "connect_ts", "sample_rate", "deflate", "snappy",
               "user_agent", "topology_zone", "topology_region", "tls", "tls_cipher_suite", "tls_version",
               "tls_negotiated_protocol", "tls_negotiated_protocol_is_mutual"]
MEMORY_KEYS = ["heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes", "gc_pause_usec_100",
               "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes", "gc_total_runs"]


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsqdProcess]:
    """Topics b_one (channels x, y; a consumer on y) and a_two; one TCP producer of both; HTTP publishes too."""
    proc = NsqdProcess(tmp_path_factory.mktemp("busy")).start()
    consumer = RawConn(proc.tcp_port)
    consumer.identify(client_id="cons", hostname="cons.host", user_agent="ua/1")
    assert consumer.sub("b_one", "y") == (FRAME_RESPONSE, b"OK")
    producer = RawConn(proc.tcp_port)
    producer.identify(client_id="prod", hostname="prod.host", user_agent="ua/2")
    producer.send("PUB b_one", b"hello")
    assert producer.frame() == (FRAME_RESPONSE, b"OK")
    producer.send("MPUB a_two", mpub_body([b"1", b"2"]))
    assert producer.frame() == (FRAME_RESPONSE, b"OK")
    assert request(proc.http_port, "POST", "/channel/create?topic=b_one&channel=x").status == 200
    assert request(proc.http_port, "POST", "/pub?topic=b_one", b"via-http").status == 200
    yield proc
    consumer.close()
    producer.close()
    proc.stop()


def _stats(nsqd: NsqdProcess, query: str = "") -> dict:
    reply = request(nsqd.http_port, "GET", f"/stats?format=json{query}")
    assert reply.status == 200 and reply.header("Content-Type") == "application/json; charset=utf-8"
    return reply.json()


def test_empty_broker(nsqd_factory: NsqdFactory) -> None:
    stats = _stats(nsqd_factory())
    assert list(stats) == ["version", "health", "start_time", "topics", "memory", "producers"]
    assert (stats["version"], stats["health"], stats["topics"], stats["producers"]) == ("1.3.0", "OK", [], None)
    assert abs(stats["start_time"] - time.time()) < 60


def test_keys_and_order(busy: NsqdProcess) -> None:
    stats = _stats(busy)
    assert [t["topic_name"] for t in stats["topics"]] == ["a_two", "b_one"], "sorted by name"
    b_one = stats["topics"][1]
    assert list(b_one) == TOPIC_KEYS
    assert [c["channel_name"] for c in b_one["channels"]] == ["x", "y"]
    x, y = b_one["channels"]
    assert list(x) == CHANNEL_KEYS and x["clients"] == [] and x["client_count"] == 0
    assert y["client_count"] == 1 and list(y["clients"][0]) == CLIENT_KEYS
    assert (b_one["message_count"], b_one["message_bytes"]) == (2, len(b"hello") + len(b"via-http"))
    assert list(stats["memory"]) == MEMORY_KEYS
    assert all(type(v) is int and v >= 0 for v in stats["memory"].values())


def test_e2e_latency_without_percentiles_is_null(busy: NsqdProcess) -> None:
    stats = _stats(busy)
    for topic in stats["topics"]:
        assert topic["e2e_processing_latency"] == {"count": 0, "percentiles": None}
        for channel in topic["channels"]:
            assert channel["e2e_processing_latency"] == {"count": 0, "percentiles": None}


def test_e2e_latency_with_percentiles(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory("--e2e-processing-latency-percentile=1.0,0.95")
    request(nsqd.http_port, "POST", "/topic/create?topic=lonely")
    request(nsqd.http_port, "POST", "/channel/create?topic=e2e&channel=c")  # 404: no topic e2e yet
    request(nsqd.http_port, "POST", "/topic/create?topic=e2e")
    request(nsqd.http_port, "POST", "/channel/create?topic=e2e&channel=c")
    body = request(nsqd.http_port, "GET", "/stats?format=json&include_mem=false").body
    zeros = b'{"count":0,"percentiles":[{"quantile":1,"value":0},{"quantile":0.95,"value":0}]}'
    assert body.count(zeros) == 2, "the channel and its topic; whole floats are written like Go, without .0"
    assert b'"topic_name":"lonely","channels":[],' in body
    assert body.count(b'{"count":0,"percentiles":null}') == 1, "a topic without channels has no stream"


def test_producers_are_tcp_publishers_with_one_pub_count(busy: NsqdProcess) -> None:
    (producer,) = _stats(busy)["producers"]
    assert producer["client_id"] == "prod" and producer["hostname"] == "prod.host"
    assert producer["pub_counts"] in ([{"topic": "b_one", "count": 1}], [{"topic": "a_two", "count": 2}])
    assert list(producer) == [*CLIENT_KEYS[:17], "pub_counts", *CLIENT_KEYS[17:]]
    consumer = _stats(busy)["topics"][1]["channels"][1]["clients"][0]
    assert "pub_counts" not in consumer and "authed" not in consumer and "auth_identity" not in consumer


def test_topic_filter(busy: NsqdProcess) -> None:
    stats = _stats(busy, "&topic=a_two")
    assert [t["topic_name"] for t in stats["topics"]] == ["a_two"]
    assert stats["producers"][0]["pub_counts"] == [{"topic": "a_two", "count": 2}], "restricted to the topic"


def test_unknown_topic_gives_nulls(busy: NsqdProcess) -> None:
    stats = _stats(busy, "&topic=nope")
    assert (stats["topics"], stats["producers"]) == (None, None)
    assert "memory" in stats


def test_channel_filter_drops_topics_without_it(busy: NsqdProcess) -> None:
    stats = _stats(busy, "&channel=y")
    assert [t["topic_name"] for t in stats["topics"]] == ["b_one"]
    assert [c["channel_name"] for c in stats["topics"][0]["channels"]] == ["y"]
    assert _stats(busy, "&channel=nope")["topics"] == []
    assert _stats(busy, "&topic=b_one&channel=nope")["topics"] == []


@pytest.mark.parametrize("value", ["false", "0"])
def test_include_clients_false(busy: NsqdProcess, value: str) -> None:
    stats = _stats(busy, f"&include_clients={value}")
    channels = stats["topics"][1]["channels"]
    assert [c["clients"] for c in channels] == [None, None]
    assert [c["client_count"] for c in channels] == [0, 1]
    assert stats["producers"] is None


@pytest.mark.parametrize("value", ["true", "1", "yes", ""])
def test_other_include_values_mean_true(busy: NsqdProcess, value: str) -> None:
    stats = _stats(busy, f"&include_clients={value}&include_mem={value}")
    assert stats["producers"] is not None and "memory" in stats


def test_include_mem_false(busy: NsqdProcess) -> None:
    assert "memory" not in _stats(busy, "&include_mem=0")
    text = request(busy.http_port, "GET", "/stats?include_mem=false").body.decode()
    assert "Memory:" not in text


def test_bad_query(busy: NsqdProcess) -> None:
    reply = request(busy.http_port, "GET", "/stats?format=json&topic=%zz")
    assert (reply.status, reply.json()) == (400, {"message": "INVALID_REQUEST"})


def test_non_utf8_topic_filter_matches_nothing(busy: NsqdProcess) -> None:
    assert _stats(busy, "&topic=%ff%fe")["topics"] is None


@pytest.mark.parametrize("fmt", ["", "&format=text", "&format=JSON", "&format=json2"])
def test_anything_but_json_is_text(busy: NsqdProcess, fmt: str) -> None:
    reply = request(busy.http_port, "GET", f"/stats?{fmt}")
    assert reply.header("Content-Type") == "text/plain; charset=utf-8"
    assert reply.body.startswith(b"nsqd v1.3.0")


def test_text_report(busy: NsqdProcess) -> None:
    request(busy.http_port, "POST", "/channel/pause?topic=b_one&channel=x")
    try:
        text = request(busy.http_port, "GET", "/stats").body.decode()
    finally:
        request(busy.http_port, "POST", "/channel/unpause?topic=b_one&channel=x")
    lines = text.split("\n")
    assert re.fullmatch(r"nsqd v1\.3\.0\S* \(built w/\S+\)", lines[0])
    assert re.fullmatch(r"start_time \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)", lines[1])
    assert re.fullmatch(r"uptime \S+s", lines[2])
    assert lines[3:6] == ["", "Health: OK", ""]
    assert lines[6] == "Memory:"
    assert [line.split("\t")[0] for line in lines[7:16]] == [f"   {k:<25}" for k in MEMORY_KEYS]
    rest = "\n".join(lines[16:])
    assert rest.startswith(
        "\nTopics:\n"
        "   [a_two          ] depth: 2     be-depth: 0     msgs: 2        e2e%: \n"
        "\n"
        "   [b_one          ] depth: 0     be-depth: 0     msgs: 2        e2e%: \n"
        "   *P [x                        ] depth: 1     be-depth: 0     inflt: 0    def: 0    re-q: 0     "
        "timeout: 0     msgs: 1        e2e%: \n"
        "      [y                        ] depth: 2     be-depth: 0     inflt: 0    def: 0    re-q: 0     "
        "timeout: 0     msgs: 2        e2e%: \n"
    )
    assert re.search(r"\n        \[V2 cons\.host:\d+ ua/1 *\] state: 3 inflt: 0    rdy: 0    fin: 0        "
                     r"re-q: 0        msgs: 0        connected: \d+s\n\nProducers:\n", rest)
    assert re.search(r"\nProducers:\n   \[V2 prod\.host:\d+ ua/2 *\] msgs: (1 |2 )       topics: (b_one=1|a_two=2) "
                     r"connected: \d+s\n$", rest)


def test_text_report_when_empty(nsqd_factory: NsqdFactory) -> None:
    text = request(nsqd_factory().http_port, "GET", "/stats?include_mem=false").body.decode()
    assert text.endswith("\nHealth: OK\n\nTopics: None\n\nProducers: None\n")


def test_paused_topic_prefix(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory()
    request(nsqd.http_port, "POST", "/topic/create?topic=p")
    request(nsqd.http_port, "POST", "/topic/pause?topic=p")
    text = request(nsqd.http_port, "GET", "/stats?include_mem=0").body.decode()
    assert "\nTopics:\n*P [p              ] depth: 0     be-depth: 0     msgs: 0        e2e%: \n" in text


def test_client_counters_follow_the_consumer(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory()
    conn = RawConn(nsqd.tcp_port)
    conn.identify(client_id="c1")
    assert conn.sub("cc", "ch") == (FRAME_RESPONSE, b"OK")
    conn.send("RDY 3")
    request(nsqd.http_port, "POST", "/mpub?topic=cc", b"1\n2")
    msgs = [conn.message() for _ in range(2)]
    conn.send(b"FIN " + msgs[0].id)
    conn.send(b"REQ " + msgs[1].id + b" 0")

    def client() -> dict:
        return _stats(nsqd, "&topic=cc")["topics"][0]["channels"][0]["clients"][0]

    wait_until(lambda: client()["requeue_count"] == 1)
    row = client()
    assert row["client_id"] == "c1" and row["ready_count"] == 3
    assert row["finish_count"] == 1 and row["state"] == 3
