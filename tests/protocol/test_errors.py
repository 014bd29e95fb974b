"""Every protocol V2 error row of nsq-compat.md §1.2-1.4, over a raw socket to an in-process nsqd."""

from __future__ import annotations

import json
import struct

import pytest

from nsqd_py.client.protocol import mpub_body
from tests.inprocess import InProcessNsqd
from tests.support import FRAME_ERROR, FRAME_RESPONSE, RawConn


def expect_fatal(conn: RawConn, payload: bytes) -> None:
    ftype, data = conn.frame()
    assert (ftype, data) == (FRAME_ERROR, payload)
    assert conn.is_closed(), "a fatal error must close the connection"


def expect_error_stays_open(conn: RawConn, payload: bytes) -> None:
    ftype, data = conn.frame()
    assert (ftype, data) == (FRAME_ERROR, payload)
    conn.send("PUB still_open_check", b"x")
    assert conn.frame() == (FRAME_RESPONSE, b"OK")


@pytest.fixture
def conn(inproc: InProcessNsqd):
    c = inproc.connect()
    yield c
    c.close()


def test_bad_magic_gets_e_bad_protocol_then_close(inproc: InProcessNsqd) -> None:
    c = inproc.connect(magic=b"  V9")
    expect_fatal(c, b"E_BAD_PROTOCOL")


@pytest.mark.parametrize(
    ("line", "payload"),
    [
        ("pub t", b"E_INVALID invalid command pub"),
        ("BOGUS", b"E_INVALID invalid command BOGUS"),
        ("RDY 1", b"E_INVALID cannot RDY in current state"),
        ("FIN 0123456789abcdef", b"E_INVALID cannot FIN in current state"),
        ("REQ 0123456789abcdef 0", b"E_INVALID cannot REQ in current state"),
        ("TOUCH 0123456789abcdef", b"E_INVALID cannot TOUCH in current state"),
        ("CLS", b"E_INVALID cannot CLS in current state"),
        ("SUB t", b"E_INVALID SUB insufficient number of parameters"),
        ("SUB  c", b'E_BAD_TOPIC SUB topic name "" is not valid'),
        ("SUB bad!topic c", b'E_BAD_TOPIC SUB topic name "bad!topic" is not valid'),
        ("SUB t bad!chan", b'E_BAD_CHANNEL SUB channel name "bad!chan" is not valid'),
        ("SUB " + "x" * 65 + " c", b'E_BAD_TOPIC SUB topic name "' + b"x" * 65 + b'" is not valid'),
        ("PUB", b"E_INVALID PUB insufficient number of parameters"),
        ("MPUB", b"E_INVALID MPUB insufficient number of parameters"),
        ("DPUB t", b"E_INVALID DPUB insufficient number of parameters"),
        ("PUB bad!t", b'E_BAD_TOPIC PUB topic name "bad!t" is not valid'),
        ("MPUB bad!t", b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!t" is not valid'),
        ("DPUB bad!t 10", b'E_BAD_TOPIC DPUB topic name "bad!t" is not valid'),
        ("DPUB t abc", b"E_INVALID DPUB could not parse timeout abc"),
        ("DPUB t -5", b"E_INVALID DPUB could not parse timeout -5"),
        ("DPUB t 3600001", b"E_INVALID DPUB timeout 3600001 out of range 0-600000"),
        ("AUTH x", b"E_INVALID AUTH invalid number of parameters"),
    ],
)
def test_fatal_command_errors(conn: RawConn, line: str, payload: bytes) -> None:
    conn.send(line)
    expect_fatal(conn, payload)


def test_topic_name_quoting_like_go(conn: RawConn) -> None:
    conn.send(b'PUB a"b\xff')
    expect_fatal(conn, b'E_BAD_TOPIC PUB topic name "a\\"b\\xff" is not valid')


@pytest.mark.parametrize(
    ("cmd", "size", "payload"),
    [
        ("PUB t", 0, b"E_BAD_MESSAGE PUB invalid message body size 0"),
        ("PUB t", -3, b"E_BAD_MESSAGE PUB invalid message body size -3"),
        ("PUB t", 1048577, b"E_BAD_MESSAGE PUB message too big 1048577 > 1048576"),
        ("DPUB t 0", 0, b"E_BAD_MESSAGE DPUB invalid message body size 0"),
        ("DPUB t 0", 1048577, b"E_BAD_MESSAGE DPUB message too big 1048577 > 1048576"),
        ("MPUB t", 0, b"E_BAD_BODY MPUB invalid body size 0"),
        ("MPUB t", 5242881, b"E_BAD_BODY MPUB body too big 5242881 > 5242880"),
        ("IDENTIFY", 0, b"E_BAD_BODY IDENTIFY invalid body size 0"),
        ("IDENTIFY", 5242881, b"E_BAD_BODY IDENTIFY body too big 5242881 > 5242880"),
        ("AUTH", 0, b"E_BAD_BODY AUTH invalid body size 0"),
    ],
)
def test_body_size_errors(conn: RawConn, cmd: str, size: int, payload: bytes) -> None:
    conn.send_raw(cmd.encode() + b"\n" + struct.pack(">i", size))
    expect_fatal(conn, payload)


def test_truncated_body_is_fatal_read_error(inproc: InProcessNsqd) -> None:
    c = inproc.connect()
    c.send_raw(b"PUB t\n" + struct.pack(">i", 10) + b"abc")
    c.sock.shutdown(1)  # half-close: the server sees EOF mid-body
    expect_fatal(c, b"E_BAD_MESSAGE PUB failed to read message body")


@pytest.mark.parametrize(
    ("inner", "payload"),
    [
        (struct.pack(">i", 0), b"E_BAD_BODY MPUB invalid message count 0"),
        (struct.pack(">i", 1048576), b"E_BAD_BODY MPUB invalid message count 1048576"),
        (struct.pack(">ii", 2, 0), b"E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
        (struct.pack(">ii", 2, 1) + b"a" + struct.pack(">i", -1),
         b"E_BAD_MESSAGE MPUB invalid message(1) body size -1"),
        (struct.pack(">ii", 1, 1048577), b"E_BAD_MESSAGE MPUB message too big 1048577 > 1048576"),
    ],
)
def test_mpub_inner_errors(conn: RawConn, inner: bytes, payload: bytes) -> None:
    conn.send_raw(b"MPUB t_mpub_err\n" + struct.pack(">i", max(len(inner), 1)) + inner)
    expect_fatal(conn, payload)


def test_bad_mpub_still_creates_topic_and_enqueues_nothing(inproc: InProcessNsqd) -> None:
    c = inproc.connect()
    c.send_raw(b"MPUB created_by_bad_mpub\n" + struct.pack(">ii", 8, 2) + struct.pack(">i", 0))
    expect_fatal(c, b"E_BAD_MESSAGE MPUB invalid message(0) body size 0")
    topics = {t["topic_name"]: t for t in inproc.stats()["topics"]}
    assert topics["created_by_bad_mpub"]["message_count"] == 0


@pytest.mark.parametrize(
    ("fields", "payload"),
    [
        ({"heartbeat_interval": 999}, b"E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid"),
        ({"heartbeat_interval": 60001}, b"E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid"),
        ({"output_buffer_timeout": 10}, b"E_BAD_BODY IDENTIFY output buffer timeout (10) is invalid"),
        ({"output_buffer_size": 10, "output_buffer_timeout": 10},
         b"E_BAD_BODY IDENTIFY output buffer timeout (10) is invalid"),
        ({"output_buffer_size": 63}, b"E_BAD_BODY IDENTIFY output buffer size (63) is invalid"),
        ({"output_buffer_size": 65537}, b"E_BAD_BODY IDENTIFY output buffer size (65537) is invalid"),
        ({"sample_rate": 100}, b"E_BAD_BODY IDENTIFY sample rate (100) is invalid"),
        ({"sample_rate": -1}, b"E_BAD_BODY IDENTIFY sample rate (-1) is invalid"),
        ({"msg_timeout": 999}, b"E_BAD_BODY IDENTIFY msg timeout (999) is invalid"),
        ({"msg_timeout": 900001}, b"E_BAD_BODY IDENTIFY msg timeout (900001) is invalid"),
        ({"heartbeat_interval": "30000"}, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        ({"heartbeat_interval": 1000.5}, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        ({"snappy": True, "deflate": True}, b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"),
    ],
)
def test_identify_validation(conn: RawConn, fields: dict, payload: bytes) -> None:
    conn.send("IDENTIFY", json.dumps({"feature_negotiation": True, **fields}).encode())
    expect_fatal(conn, payload)


def test_identify_bad_json(conn: RawConn) -> None:
    conn.send("IDENTIFY", b"{not json")
    expect_fatal(conn, b"E_BAD_BODY IDENTIFY failed to decode JSON body")


def test_sub_needs_heartbeats(conn: RawConn) -> None:
    conn.identify(heartbeat_interval=-1)
    conn.send("SUB t c")
    expect_fatal(conn, b"E_INVALID cannot SUB with heartbeats disabled")


def test_second_sub_and_identify_after_sub_are_fatal(inproc: InProcessNsqd) -> None:
    c = inproc.connect()
    c.identify()
    assert c.sub("t_twice", "c") == (FRAME_RESPONSE, b"OK")
    c.send("SUB t_twice c")
    expect_fatal(c, b"E_INVALID cannot SUB in current state")
    c2 = inproc.connect()
    c2.identify()
    c2.sub("t_twice", "c")
    c2.send("IDENTIFY", b"{}")
    expect_fatal(c2, b"E_INVALID cannot IDENTIFY in current state")


@pytest.mark.parametrize(
    ("line", "payload"),
    [
        ("RDY abc", b"E_INVALID RDY could not parse count abc"),
        ("RDY -1", b"E_INVALID RDY could not parse count -1"),
        ("RDY 2501", b"E_INVALID RDY count 2501 out of range 0-2500"),
        ("FIN", b"E_INVALID FIN insufficient number of params"),
        ("FIN short", b"E_INVALID invalid message ID"),
        ("REQ 0123456789abcdef", b"E_INVALID REQ insufficient number of params"),
        ("REQ 0123456789abcdef x", b"E_INVALID REQ could not parse timeout x"),
        ("TOUCH", b"E_INVALID TOUCH insufficient number of params"),
        ("AUTH", None),
    ],
)
def test_subscribed_state_errors(conn: RawConn, line: str, payload: bytes | None) -> None:
    conn.identify()
    conn.sub("t_sub_errors", "c")
    if line == "AUTH":
        conn.send_raw(b"AUTH\n" + struct.pack(">i", 3) + b"abc")
        expect_fatal(conn, b"E_INVALID cannot AUTH in current state")
        return
    conn.send(line)
    expect_fatal(conn, payload)


@pytest.mark.parametrize("cmd", ["FIN", "TOUCH", "REQ"])
def test_fin_req_touch_unknown_id_are_not_fatal(conn: RawConn, cmd: str) -> None:
    conn.identify()
    conn.sub("t_nonfatal", "c")
    suffix = " 0" if cmd == "REQ" else ""
    conn.send(f"{cmd} 0000000000000000{suffix}")
    name = {"FIN": "FIN", "TOUCH": "TOUCH", "REQ": "REQ"}[cmd]
    expect_error_stays_open(conn, f"E_{name}_FAILED {name} 0000000000000000 failed ID not in flight".encode())


def test_fin_of_message_owned_by_other_client(inproc: InProcessNsqd) -> None:
    pub = inproc.connect()
    pub.send("PUB t_owner", b"mine")
    assert pub.frame() == (FRAME_RESPONSE, b"OK")
    a = inproc.connect()
    a.identify()
    a.sub("t_owner", "c")
    a.send("RDY 1")
    msg = a.message()
    b = inproc.connect()
    b.identify()
    b.sub("t_owner", "c")
    b.send(b"FIN " + msg.id)
    assert b.frame() == (FRAME_ERROR, b"E_FIN_FAILED FIN " + msg.id + b" failed client does not own message")
    a.send(b"FIN " + msg.id)
    a.send("NOP")


def test_auth_disabled(conn: RawConn) -> None:
    conn.send_raw(b"AUTH\n" + struct.pack(">i", 6) + b"secret")
    expect_fatal(conn, b"E_AUTH_DISABLED AUTH disabled")


def test_too_long_command_line_closes(conn: RawConn) -> None:
    conn.send_raw(b"X" * 20000)
    assert conn.is_closed()


def test_errors_do_not_disturb_other_clients(inproc: InProcessNsqd) -> None:
    good = inproc.connect()
    bad = inproc.connect()
    bad.send_raw(b"MPUB t\n" + struct.pack(">i", 4) + b"\xff\xff\xff\xff")
    assert bad.frame()[0] == FRAME_ERROR
    good.send("MPUB t_good", mpub_body([b"a", b"b"]))
    assert good.frame() == (FRAME_RESPONSE, b"OK")
