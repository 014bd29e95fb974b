"""nsqlookupd on its own: the `  V1` TCP protocol, the HTTP API, inactive and tombstoned producers."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from nsqd_py.testing import free_port
from tests.cluster.util import NSQLOOKUPD_BIN, LookupdProcess, RawLookupConn
from tests.support import wait_until


@pytest.fixture(scope="module")
def lookupd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LookupdProcess]:
    """One nsqlookupd for this module (overrides the per-test one); tests use distinct topic names."""
    proc = LookupdProcess(tmp_path_factory.mktemp("lookupd")).start()
    yield proc
    proc.stop()


def test_identify_reply_and_registration(lookupd: LookupdProcess) -> None:
    """IDENTIFY answers with lookupd's own info (sorted keys); REGISTER shows up in every read endpoint."""
    conn = RawLookupConn(lookupd.tcp_port)
    try:
        reply = conn.identify(hostname="h1", tcp_port=4150, http_port=4151, topology_zone="z1")
        assert list(json.loads(reply)) == ["broadcast_address", "hostname", "http_port", "tcp_port", "version"]
        assert json.loads(reply)["tcp_port"] == lookupd.tcp_port
        assert json.loads(reply)["http_port"] == lookupd.http_port
        assert json.loads(reply)["broadcast_address"] == "127.0.0.1"
        assert conn.command("REGISTER t1 c1") == b"OK"
        assert conn.command("REGISTER t2") == b"OK"
        assert conn.command("PING") == b"OK"

        lookup = lookupd.get("/lookup", topic="t1")
        assert lookup.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
        assert lookup.json()["channels"] == ["c1"]
        (producer,) = lookup.json()["producers"]
        assert list(producer) == ["remote_address", "hostname", "broadcast_address", "tcp_port", "http_port",
                                  "version", "topology_zone", "topology_region"]
        assert (producer["hostname"], producer["tcp_port"], producer["topology_zone"]) == ("h1", 4150, "z1")
        assert {"t1", "t2"} <= set(lookupd.get("/topics").json()["topics"])
        assert lookupd.channels("t1") == ["c1"]
        assert lookupd.channels("nope") == []
        (node,) = [n for n in lookupd.get("/nodes").json()["producers"] if n["hostname"] == "h1"]
        assert sorted(node["topics"]) == ["t1", "t2"] and node["tombstones"] == [False, False]
        debug = lookupd.get("/debug").json()
        assert {"client::", "topic:t1:", "topic:t2:", "channel:t1:c1"} <= set(debug)
    finally:
        conn.close()
    # closing the connection drops every registration of that producer
    wait_until(lambda: lookupd.producers("t1") == [] and lookupd.producers("t2") == [])


def test_unregister_and_ephemeral(lookupd: LookupdProcess) -> None:
    conn = RawLookupConn(lookupd.tcp_port)
    try:
        conn.identify()
        conn.command("REGISTER t c")
        conn.command("REGISTER t e#ephemeral")
        assert sorted(lookupd.channels("t")) == ["c", "e#ephemeral"]
        assert conn.command("UNREGISTER t c") == b"OK"
        assert conn.command("UNREGISTER t e#ephemeral") == b"OK"
        # a plain channel's registration stays (without producers), an ephemeral one goes
        assert lookupd.channels("t") == ["c"]
        assert conn.command("UNREGISTER t") == b"OK"
        assert lookupd.producers("t") == []
        assert lookupd.get("/lookup", topic="t").status_code == 200
    finally:
        conn.close()
    assert "UNREGISTER category:channel key:t subkey:c" in lookupd.log()


@pytest.mark.parametrize(
    ("commands", "error"),
    [
        (["REGISTER t"], b"E_INVALID client must IDENTIFY"),
        (["FOO"], b"E_INVALID invalid command FOO"),
        (["IDENTIFY!", "REGISTER"], b"E_INVALID REGISTER insufficient number of params"),
        (["IDENTIFY!", "REGISTER bad!"], b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"),
        (["IDENTIFY!", "UNREGISTER t bad!"], b"E_BAD_CHANNEL UNREGISTER channel name 'bad!' is not valid"),
        (["IDENTIFY!", "IDENTIFY!"], b"E_INVALID cannot IDENTIFY again"),
    ],
)
def test_protocol_errors_close_the_connection(lookupd: LookupdProcess, commands: list[str], error: bytes) -> None:
    conn = RawLookupConn(lookupd.tcp_port)
    try:
        reply = b""
        for cmd in commands:
            reply = conn.identify() if cmd == "IDENTIFY!" else conn.command(cmd)
        assert reply == error
        assert conn.is_closed()
    finally:
        conn.close()


def test_identify_validation_and_bad_magic(lookupd: LookupdProcess) -> None:
    conn = RawLookupConn(lookupd.tcp_port)
    assert conn.command("IDENTIFY", json.dumps({"broadcast_address": "x", "tcp_port": 1}).encode()) == (
        b"E_BAD_BODY IDENTIFY missing fields")
    conn.close()
    conn = RawLookupConn(lookupd.tcp_port)
    assert conn.command("IDENTIFY", b"{nope") == b"E_BAD_BODY IDENTIFY failed to decode JSON body"
    conn.close()
    conn = RawLookupConn(lookupd.tcp_port, magic=b"  V2")
    assert conn.reply() == b"E_BAD_PROTOCOL"
    assert conn.is_closed()
    conn.close()


def test_http_writes_and_errors(lookupd: LookupdProcess) -> None:
    assert lookupd.get("/ping").text == "OK"
    assert lookupd.get("/info").json() == {"version": "1.3.0"}
    assert lookupd.get("/lookup").json() == {"message": "MISSING_ARG_TOPIC"}
    assert lookupd.get("/lookup", topic="none").status_code == 404
    assert lookupd.post("/topic/create", topic="bad!").json() == {"message": "INVALID_ARG_TOPIC"}
    assert lookupd.post("/channel/create", topic="h").json() == {"message": "MISSING_ARG_CHANNEL"}
    created = lookupd.post("/channel/create", topic="h", channel="c")
    assert (created.status_code, created.content) == (200, b"")
    assert lookupd.get("/lookup", topic="h").json() == {"channels": ["c"], "producers": []}
    assert lookupd.post("/channel/delete", topic="h", channel="x").status_code == 404
    assert lookupd.post("/channel/delete", topic="h", channel="c").status_code == 200
    assert lookupd.post("/topic/create", topic="u").status_code == 200
    assert {"h", "u"} <= set(lookupd.get("/topics").json()["topics"])
    assert lookupd.post("/topic/delete", topic="h").status_code == 200
    assert "h" not in lookupd.get("/topics").json()["topics"]
    assert lookupd.get("/topic/create").status_code == 405
    assert lookupd.get("/nope").json() == {"message": "NOT_FOUND"}


def test_inactive_and_tombstoned_producers(lookupd_factory) -> None:
    """A producer that stops pinging leaves /lookup and /nodes after --inactive-producer-timeout (its
    connection still open); a PING brings it back. A tombstone hides it from /lookup only."""
    lookupd = lookupd_factory("--inactive-producer-timeout=3s", "--tombstone-lifetime=3s")
    conn = RawLookupConn(lookupd.tcp_port)
    try:
        conn.identify(http_port=4151)
        conn.command("REGISTER t")
        assert len(lookupd.producers("t")) == 1
        wait_until(lambda: lookupd.producers("t") == [], timeout=10)
        assert lookupd.get("/nodes").json()["producers"] == []
        assert conn.command("PING") == b"OK"
        assert len(lookupd.producers("t")) == 1
        assert lookupd.post("/topic/tombstone", topic="t", node="127.0.0.1:4151").status_code == 200
        assert lookupd.producers("t") == []
        assert lookupd.get("/nodes").json()["producers"][0]["tombstones"] == [True]
        assert lookupd.post("/topic/tombstone", topic="t").json() == {"message": "MISSING_ARG_NODE"}
    finally:
        conn.close()


@pytest.mark.process
def test_command_line(tmp_path) -> None:
    out = subprocess.run([str(NSQLOOKUPD_BIN), "--version"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0 and out.stdout.startswith("nsqlookupd v1.3.0")
    out = subprocess.run([str(NSQLOOKUPD_BIN), "--nope"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 2 and "-inactive-producer-timeout duration" in out.stderr
    busy = LookupdProcess(tmp_path).start()
    try:
        out = subprocess.run([str(NSQLOOKUPD_BIN), f"--tcp-address={busy.tcp_address}",
                              f"--http-address=127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=20)
        assert out.returncode == 1
        assert f"FATAL: failed to instantiate nsqlookupd%!(EXTRA *errors.errorString=listen ({busy.tcp_address})" \
            in out.stderr
    finally:
        busy.stop()
    config = tmp_path / "lookupd.cfg"
    config.write_text('tombstone_lifetime = "2s"\nlog_prefix = "[lk] "\n')
    proc = LookupdProcess(tmp_path, f"--config={config}").start()
    try:
        wait_until(lambda: "[lk] " in proc.log() and "TCP: listening on" in proc.log(), timeout=10)
    finally:
        proc.stop()
