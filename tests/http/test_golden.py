"""Every golden answer of the real Go nsqd, replayed against ours in the same state and compared in shape.

The state is rebuilt as /work/shared/fixtures/http/README.md describes it (topic `orders`, channel `billing`
with one consumer holding 2 messages in flight, paused channel `audit`, one TCP producer), then the 38
requests run in file order against one server, as they did against Go's. Compared: status, the set and
spelling of header names, Content-Type, X-Nsq-Content-Type, Allow, Connection, empty bodies, error texts and
config values exactly; JSON documents by keys, key order, value types, null versus [] and list lengths; text
/stats line by line with run-dependent values masked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqd_py.client.protocol import mpub_body
from tests.http.http_support import Golden, load_goldens, normalize_stats_text, shape_diff
from tests.support import FRAME_RESPONSE, NsqdProcess, RawConn, Reply, request, wait_until

GOLDENS = load_goldens()
#: Present in the golden files but deliberately not produced yet, with the reason:
#: `global_msg_count` is HEAD's topology-experiment counter (omitted when 0); the core does not count it.
KNOWN_GAPS = frozenset({"global_msg_count"})
#: Headers whose presence depends on the body size or the moment (Go switches to chunked above ~2 KB).
_FRAMING_HEADERS = {"date", "content-length", "transfer-encoding"}


def _build_fixture_state(proc: NsqdProcess) -> list[RawConn]:
    port = proc.http_port
    assert request(port, "POST", "/topic/create?topic=orders").status == 200
    assert request(port, "POST", "/channel/create?topic=orders&channel=audit").status == 200
    assert request(port, "POST", "/channel/pause?topic=orders&channel=audit").status == 200
    consumer = RawConn(proc.tcp_port)
    consumer.identify(client_id="fixture-consumer", hostname="consumer.fixture.local", user_agent="fixture-gen/1.0")
    assert consumer.sub("orders", "billing") == (FRAME_RESPONSE, b"OK")
    producer = RawConn(proc.tcp_port)
    producer.identify(client_id="fixture-producer", hostname="producer.fixture.local", user_agent="fixture-gen/1.0")
    for i in range(10):
        producer.send("PUB orders", b"pub-%d" % i)
        assert producer.frame() == (FRAME_RESPONSE, b"OK")
    producer.send("MPUB orders", mpub_body([b"mpub-%d" % i for i in range(20)]))
    assert producer.frame() == (FRAME_RESPONSE, b"OK")
    producer.send("DPUB orders 60000", b"later")
    assert producer.frame() == (FRAME_RESPONSE, b"OK")
    consumer.send("RDY 10")
    received = [consumer.message() for _ in range(10)]
    consumer.send("RDY 2")  # first, or every FIN would bring another message
    for msg in received[:7]:
        consumer.send(b"FIN " + msg.id)
    consumer.send(b"REQ " + received[7].id + b" 30000")

    def settled() -> bool:
        billing = proc.stats(topic="orders", channel="billing")["topics"][0]["channels"][0]
        client = billing["clients"][0]
        return billing["in_flight_count"] == 2 and client["finish_count"] == 7 and client["ready_count"] == 2

    wait_until(settled)
    return [consumer, producer]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Golden, Reply]]]:
    proc = NsqdProcess(Path(tmp_path_factory.mktemp("golden")), "--e2e-processing-latency-percentile=0.99,0.5")
    proc.start()
    conns = []
    try:
        conns = _build_fixture_state(proc)
        results = {}
        for golden in GOLDENS:
            reply = request(proc.http_port, golden.method, golden.target, golden.request_body,
                            golden.request_headers)
            results[golden.file] = (golden, reply)
        yield results
    finally:
        for conn in conns:
            conn.close()
        proc.stop()


def _header_names(headers: list[tuple[str, str]]) -> list[str]:
    return sorted(name for name, _ in headers if name.lower() not in _FRAMING_HEADERS)


@pytest.mark.parametrize("name", [g.file for g in GOLDENS])
def test_matches_go_nsqd(replayed: dict[str, tuple[Golden, Reply]], name: str) -> None:
    golden, reply = replayed[name]
    assert reply.status == golden.status, reply.body
    assert _header_names(reply.headers) == _header_names(golden.headers)
    for header in ("Content-Type", "X-Nsq-Content-Type", "Allow", "Connection"):
        assert reply.header(header) == golden.header(header), header
    if golden.header("Content-Length") == "0":
        assert reply.header("Content-Length") == "0" and reply.body == b""
    content_type = golden.header("Content-Type") or ""
    if content_type.startswith("application/json"):
        want, got = json.loads(golden.body), reply.json()
        if isinstance(want, dict) and "version" in want:  # /info and /stats: values vary by run
            assert shape_diff(want, got, drop_keys=KNOWN_GAPS) == []
        else:  # error texts and /config values are exact
            assert got == want
    elif golden.target.startswith("/stats"):
        assert normalize_stats_text(reply.body.decode()) == normalize_stats_text(golden.body.decode())
    else:
        assert reply.body == golden.body


def test_known_gaps_are_still_gaps(replayed: dict[str, tuple[Golden, Reply]]) -> None:
    """When the core starts counting `global_msg_count`, drop it from KNOWN_GAPS."""
    golden, reply = replayed["03-stats-json.http"]
    assert "global_msg_count" in json.dumps(json.loads(golden.body))
    assert "global_msg_count" not in reply.body.decode()
