"""Protocol V2 commands on their success paths, byte for byte, against the real nsqd."""

from __future__ import annotations

import json
import re
import struct
import time

import gevent
import pytest

from nsqd_py.client.protocol import mpub_body
from tests.inprocess import InProcessFactory, InProcessNsqd
from tests.support import FRAME_MESSAGE, FRAME_RESPONSE

NEGOTIATED_KEYS = [
    "max_rdy_count", "version", "max_msg_timeout", "msg_timeout", "tls_v1", "deflate", "deflate_level",
    "max_deflate_level", "snappy", "sample_rate", "auth_required", "output_buffer_size", "output_buffer_timeout",
]


def test_identify_negotiated_reply_is_nsqds_exactly(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    conn.send("IDENTIFY", json.dumps({"feature_negotiation": True}).encode())
    ftype, data = conn.frame()
    assert ftype == FRAME_RESPONSE
    assert data == (
        b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,'
        b'"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,"sample_rate":0,'
        b'"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}'
    )


def test_identify_reply_has_topology_keys_only_with_their_experiment(inproc_factory: InProcessFactory) -> None:
    """`topology_zone`/`topology_region` come from nsqd's development branch: off unless its experiment is on."""
    nsqd = inproc_factory(enable_experiment=["topology-aware-consumption"])
    reply = nsqd.connect().identify(topology_zone="z1", topology_region="r1")
    assert isinstance(reply, dict) and list(reply) == [*NEGOTIATED_KEYS, "topology_region", "topology_zone"]
    assert (reply["topology_zone"], reply["topology_region"]) == ("z1", "r1")


def test_identify_reflects_negotiated_values(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    reply = conn.identify(msg_timeout=5000, sample_rate=10, output_buffer_size=-1, deflate_level=9,
                          unknown_key="ignored", Client_ID="case-insensitive")
    assert isinstance(reply, dict) and list(reply) == NEGOTIATED_KEYS
    assert reply["msg_timeout"] == 5000 and reply["sample_rate"] == 10
    assert reply["output_buffer_size"] == 1 and reply["output_buffer_timeout"] == 0
    assert reply["deflate_level"] == 6, "capped at --max-deflate-level"


def test_identify_without_negotiation_says_ok_and_may_repeat(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    conn.send("IDENTIFY", b'{"client_id": "a"}')
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    conn.send("IDENTIFY", b'{"client_id": "b"}')
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    assert conn.sub("t_ident_twice", "c") == (FRAME_RESPONSE, b"OK")


def test_pub_mpub_dpub_and_delivery_frames(inproc: InProcessNsqd) -> None:
    consumer = inproc.connect()
    consumer.identify()
    assert consumer.sub("t_frames", "c") == (FRAME_RESPONSE, b"OK")
    consumer.send("RDY")  # a missing count means 1
    pub = inproc.connect()
    before = time.time_ns()
    pub.send("PUB t_frames", b"one")
    assert pub.frame() == (FRAME_RESPONSE, b"OK")
    msg = consumer.message()
    assert msg.body == b"one" and msg.attempts == 1 and re.fullmatch(rb"[0-9a-f]{16}", msg.id)
    assert before - 10**9 < msg.timestamp < time.time_ns() + 10**9
    consumer.send(b"FIN " + msg.id)
    consumer.send("RDY 10")
    pub.send("MPUB t_frames", mpub_body([b"a", b"bb", b"ccc"]))
    assert pub.frame() == (FRAME_RESPONSE, b"OK")
    batch = [consumer.message() for _ in range(3)]
    assert sorted(m.body for m in batch) == [b"a", b"bb", b"ccc"]
    ids = sorted(int(m.id, 16) for m in batch)
    assert ids == list(range(ids[0], ids[0] + 3)), "MPUB ids are consecutive"
    for m in batch:
        consumer.send(b"FIN " + m.id)
    sent = time.monotonic()
    pub.send("DPUB t_frames 300", b"later")
    assert pub.frame() == (FRAME_RESPONSE, b"OK")
    late = consumer.message()
    assert late.body == b"later" and time.monotonic() - sent >= 0.25


def test_touch_keeps_a_message_past_its_timeout(inproc: InProcessNsqd) -> None:
    consumer = inproc.connect()
    consumer.identify(msg_timeout=2000)
    consumer.sub("t_touch", "c")
    consumer.send("RDY 1")
    inproc.publish("t_touch", b"t")
    msg = consumer.message()
    for _ in range(6):  # 3 s in all, well past the 2 s timeout; each TOUCH comes 1.5 s before it is due
        gevent.sleep(0.5)
        consumer.send(b"TOUCH " + msg.id)
    consumer.send(b"FIN " + msg.id)
    consumer.send("NOP")
    consumer.sock.settimeout(1.5)
    with pytest.raises(TimeoutError):
        consumer.frame()


def test_cls_replies_close_wait_and_stops_deliveries(inproc: InProcessNsqd) -> None:
    consumer = inproc.subscriber("t_cls")
    inproc.publish("t_cls", b"1", b"2")
    msg = consumer.message()
    consumer.send("CLS")
    assert consumer.frame() == (FRAME_RESPONSE, b"CLOSE_WAIT")
    consumer.send("RDY 5")  # ignored while closing
    consumer.send(b"FIN " + msg.id)  # still allowed
    consumer.send("NOP")
    consumer.sock.settimeout(1.0)
    with pytest.raises(TimeoutError):
        consumer.frame()


def test_heartbeats_and_read_deadline(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    conn.identify(heartbeat_interval=1000)
    start = time.monotonic()
    assert conn.frame(skip_heartbeats=False) == (FRAME_RESPONSE, b"_heartbeat_")
    assert 0.7 < time.monotonic() - start < 2.0
    conn.send("NOP")
    assert conn.frame(skip_heartbeats=False) == (FRAME_RESPONSE, b"_heartbeat_")
    silent_start = time.monotonic()
    # answer nothing from now on: two intervals of silence and the server hangs up
    assert conn.is_closed(wait=4.0)
    assert time.monotonic() - silent_start < 3.5
    assert "failed to read command - i/o timeout" in inproc.log()


def test_nop_has_no_reply(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    conn.send("NOP")
    conn.send("PUB t_nop", b"x")
    assert conn.frame() == (FRAME_RESPONSE, b"OK")


def test_pub_allowed_while_subscribed(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    conn.identify()
    conn.sub("t_sub_pub", "c")
    conn.send("PUB t_sub_pub_other", b"x")
    assert conn.frame() == (FRAME_RESPONSE, b"OK")


def test_mpub_outer_length_is_not_reconciled_like_nsqd(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    inner = mpub_body([b"abc"])
    # the outer length claims more than the inner structure uses; nsqd reads the stream as it goes
    conn.send_raw(b"MPUB t_outer\n" + struct.pack(">i", len(inner) + 50) + inner)
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    conn.send("PUB t_outer", b"next")
    assert conn.frame() == (FRAME_RESPONSE, b"OK")


def test_large_mpub_split_across_reads(inproc: InProcessNsqd) -> None:
    bodies = [bytes([i % 256]) * 5000 for i in range(400)]
    consumer = inproc.subscriber("t_bigmpub", "c", rdy=500)
    pub = inproc.connect()
    payload = b"MPUB t_bigmpub\n" + struct.pack(">i", len(mpub_body(bodies))) + mpub_body(bodies)
    for i in range(0, len(payload), 7777):
        pub.send_raw(payload[i : i + 7777])
        gevent.sleep(0.001)
    assert pub.frame() == (FRAME_RESPONSE, b"OK")
    got = sorted((consumer.message().body for _ in range(400)), key=lambda b: (b[0], len(b)))
    assert sorted(got) == sorted(bodies)


def test_max_channel_consumers(inproc_factory: InProcessFactory) -> None:
    proc = inproc_factory(max_channel_consumers=1)
    first = proc.connect()
    first.identify()
    assert first.sub("t_limit", "c") == (FRAME_RESPONSE, b"OK")
    second = proc.connect()
    second.identify()
    second.send("SUB t_limit c")
    assert second.frame() == (1, b"E_SUB_FAILED SUB failed consumers for t_limit:c exceeds limit of 1")


def test_rdy_above_custom_max(inproc_factory: InProcessFactory) -> None:
    proc = inproc_factory(max_rdy_count=10, max_msg_size=10)
    conn = proc.connect()
    reply = conn.identify()
    assert isinstance(reply, dict) and reply["max_rdy_count"] == 10
    conn.sub("t_maxrdy", "c")
    conn.send("RDY 11")
    assert conn.frame() == (1, b"E_INVALID RDY count 11 out of range 0-10")
    pub = proc.connect()
    pub.send("PUB t", b"x" * 11)
    assert pub.frame() == (1, b"E_BAD_MESSAGE PUB message too big 11 > 10")


def test_delivery_frame_layout(inproc: InProcessNsqd) -> None:
    consumer = inproc.subscriber("t_layout")
    inproc.publish("t_layout", b"xyz")
    header = consumer._read(8)
    size, ftype = struct.unpack(">ii", header)
    assert ftype == FRAME_MESSAGE and size == 4 + 26 + 3
    payload = consumer._read(size - 4)
    assert payload.endswith(b"xyz") and struct.unpack(">H", payload[8:10])[0] == 1
