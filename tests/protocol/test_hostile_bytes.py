"""Hostile bytes on the TCP protocol get the same answers as from Go nsqd 1.3.0 (each row was compared with it):
the 16 KiB command-line limit, error texts that echo the client's bytes unchanged, and IDENTIFY bodies decoded
as Go's encoding/json decodes them."""

from __future__ import annotations

import json
import struct

import pytest

from tests.inprocess import InProcessNsqd
from tests.support import FRAME_ERROR, FRAME_RESPONSE, RawConn

#: nsqd's bufio reader holds 16 KiB: a command line up to that size with its newline is read, a longer one is not
LINE_LIMIT = 16 * 1024


def _line_of(length: int) -> bytes:
    """A NOP (which ignores its parameters) whose line, newline included, is ``length`` bytes."""
    return b"NOP " + b"a" * (length - 5) + b"\n"


@pytest.mark.parametrize("one_write", [True, False])
def test_command_line_limit(inproc: InProcessNsqd, one_write: bool) -> None:
    """Checked on every line, also when the newline arrives in the same read as the rest."""
    ok = inproc.connect()
    ok.send_raw(_line_of(LINE_LIMIT))
    ok.send("PUB line_limit", b"x")
    assert ok.frame() == (FRAME_RESPONSE, b"OK")
    ok.close()
    too_long = inproc.connect()
    data = _line_of(LINE_LIMIT + 1)
    if one_write:
        too_long.send_raw(data)
    else:
        too_long.send_raw(data[:-1])
        too_long.send_raw(data[-1:])
    assert too_long.is_closed(), "Go closes the connection without a reply"
    assert "failed to read command - bufio: buffer full" in inproc.log()


def test_pub_with_a_17000_byte_line_is_refused(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    conn.send_raw(b"PUB t " + b"x" * 17_000 + b"\n")
    assert conn.is_closed()


@pytest.mark.parametrize(("command", "text"), [
    (b"\xff\xfe", b"E_INVALID invalid command \xff\xfe"),
    (b"A\x80B", b"E_INVALID invalid command A\x80B"),
    (b"\xc3\xa9", b"E_INVALID invalid command \xc3\xa9"),
    (b"FOO\x00", b"E_INVALID invalid command FOO\x00"),
    (b"PUB \xff\xfe", b'E_BAD_TOPIC PUB topic name "\\xff\\xfe" is not valid'),
])
def test_error_texts_echo_the_clients_bytes(inproc: InProcessNsqd, command: bytes, text: bytes) -> None:
    conn = inproc.connect()
    conn.send_raw(command + b"\n")
    assert conn.frame() == (FRAME_ERROR, text)
    assert conn.is_closed()


def test_rdy_error_echoes_raw_bytes(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    assert conn.sub("raw_rdy", "c") == (FRAME_RESPONSE, b"OK")
    conn.send_raw(b"RDY \xff\xfe\n")
    assert conn.frame() == (FRAME_ERROR, b"E_INVALID RDY could not parse count \xff\xfe")


def _identify(conn: RawConn, body: bytes) -> tuple[int, bytes]:
    try:
        conn.send_raw(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        return conn.frame()
    finally:
        conn.close()


def _negotiated(conn: RawConn, body: bytes) -> dict:
    ftype, data = _identify(conn, body)
    assert ftype == FRAME_RESPONSE, data
    return json.loads(data)


NEST_OK = b"[" * 9_999 + b"]" * 9_999  # with the object around it: Go's 10,000 levels exactly
NEST_TOO_DEEP = b"[" * 10_000 + b"]" * 10_000

ACCEPTED = {
    "invalid utf-8 in a string": (b'{"feature_negotiation":true,"client_id":"\xff\xfe"}', {}),
    "lone surrogate escape": (b'{"feature_negotiation":true,"client_id":"\\ud800"}', {}),
    "huge number under an unknown key": (b'{"feature_negotiation":true,"x":1e400}', {}),
    "folded key (long s)": (b'{"\\u017fnappy":true,"feature_negotiation":true}', {"snappy": True}),
    "upper-case keys": (b'{"FEATURE_NEGOTIATION":true,"Snappy":true}', {"snappy": True}),
    "nesting at Go's limit": (b'{"feature_negotiation":true,"x":' + NEST_OK + b"}", {}),
    "wrong type under a key 1.3.0 lacks": (b'{"feature_negotiation":true,"topology_zone":1}', {}),
    "invalid utf-8 in a key": (b'{"feature_negotiation":true,"client_\xffid":"x"}', {}),
    "the last repeated key wins": (b'{"feature_negotiation":true,"sample_rate":5,"sample_rate":7}', {"sample_rate": 7}),
    "null leaves the default": (b'{"feature_negotiation":true,"snappy":null}', {"snappy": False}),
    "whitespace around": (b' {"feature_negotiation":true}\n', {}),
}

REFUSED = {
    "nesting past Go's limit": b'{"feature_negotiation":true,"x":' + NEST_TOO_DEEP + b"}",
    "float for an int": b'{"feature_negotiation":true,"sample_rate":1.0}',
    "exponent for an int": b'{"feature_negotiation":true,"msg_timeout":1e3}',
    "string for an int": b'{"feature_negotiation":true,"heartbeat_interval":"1"}',
    "array for a bool": b'{"feature_negotiation":true,"snappy":[true]}',
    "int32 overflow": b'{"feature_negotiation":true,"sample_rate":2147483648}',
    "trailing data": b'{"feature_negotiation":true} x',
    "trailing comma": b'{"feature_negotiation":true,"a":1,}',
    "leading zero": b'{"feature_negotiation":true,"a":01}',
    "control byte in a string": b'{"feature_negotiation":true,"client_id":"a\x01"}',
    "not an object": b"[]",
}


@pytest.mark.parametrize(("body", "expected"), ACCEPTED.values(), ids=ACCEPTED.keys())
def test_identify_accepts_what_go_accepts(inproc: InProcessNsqd, body: bytes, expected: dict) -> None:
    reply = _negotiated(inproc.connect(), body)
    assert {key: reply[key] for key in expected} == expected
    assert "topology_zone" not in reply


@pytest.mark.parametrize("body", REFUSED.values(), ids=REFUSED.keys())
def test_identify_refuses_what_go_refuses(inproc: InProcessNsqd, body: bytes) -> None:
    assert _identify(inproc.connect(), body) == (FRAME_ERROR, b"E_BAD_BODY IDENTIFY failed to decode JSON body")


def test_identify_client_id_is_decoded_as_go_does(inproc: InProcessNsqd) -> None:
    """Invalid bytes and lone surrogates become U+FFFD (one per invalid byte); /stats shows the result."""
    conn = inproc.connect()
    conn.send_raw(b"IDENTIFY\n")
    body = b'{"client_id":"a\xff\xfe\\ud800b","hostname":"h\xe2\x82"}'
    conn.send_raw(struct.pack(">i", len(body)) + body)
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    assert conn.sub("decoded_ids", "c") == (FRAME_RESPONSE, b"OK")
    clients = inproc.stats(topic="decoded_ids")["topics"][0]["channels"][0]["clients"]
    assert (clients[0]["client_id"], clients[0]["hostname"]) == ("a\ufffd\ufffd\ufffdb", "h\ufffd\ufffd")
    conn.close()
