"""nsqd_py.client against the real nsqd: publish, consume, heartbeats, errors, reconnects, TLS and compression."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nsqd_py.client import (
    Connection,
    Consumer,
    Message,
    NSQConnectionError,
    Producer,
    Response,
    ServerError,
    lookup_producers,
    lookupd_topics,
    nsqd_stats,
)
from nsqd_py.client.connection import split_address
from nsqd_py.client.protocol import command, id_commands, mpub_body
from nsqd_py.testing import free_port
from tests.security.certs import make_pki
from tests.support import REPO, NsqdProcess, drain, unique
from tests.tools.support import FakeLookupd


def consume(conn: Connection, n: int, timeout: float = 5.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        frame = conn.read_frame(0.2)
        if isinstance(frame, Message):
            got.append(frame)
    return got


def test_command_encoding() -> None:
    assert command("SUB", "t", "c") == b"SUB t c\n"
    assert command("PUB", "t", body=b"xy") == b"PUB t\n\x00\x00\x00\x02xy"
    assert mpub_body([b"a", b"bc"]) == b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x02bc"
    assert split_address("127.0.0.1:4150") == ("127.0.0.1", 4150)
    assert split_address("[::1]:4150") == ("::1", 4150)
    assert split_address("/run/nsqd.sock") == "/run/nsqd.sock"


def test_id_commands_encode_a_batch() -> None:
    assert id_commands("FIN", [b"a" * 16, b"b" * 16]) == b"FIN " + b"a" * 16 + b"\nFIN " + b"b" * 16 + b"\n"
    assert id_commands("REQ", [b"c" * 16], "0") == b"REQ " + b"c" * 16 + b" 0\n"
    assert id_commands("TOUCH", []) == b""


def test_read_frames_parses_a_whole_read_and_answers_heartbeats(tmp_path: Path) -> None:
    """One socket read with a heartbeat, messages, an error and half a frame: every complete frame in one call."""
    def frame(ftype: int, data: bytes) -> bytes:
        return (len(data) + 4).to_bytes(4, "big") + ftype.to_bytes(4, "big") + data

    def message(i: int) -> bytes:
        return frame(2, (1000 + i).to_bytes(8, "big") + (i + 1).to_bytes(2, "big") + b"%016d" % i + b"body%d" % i)

    wire = frame(0, b"_heartbeat_") + message(0) + message(1) + frame(1, b"E_FIN_FAILED x") + message(2)
    path = str(tmp_path / "fake-nsqd.sock")
    received: list[bytes] = []
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        conn = Connection(path).connect()
        peer, _ = server.accept()
        with peer, conn:
            assert peer.recv(4) == b"  V2"
            peer.sendall(wire[:-5])
            frames: list = []
            deadline = time.monotonic() + 5
            while len(frames) < 3 and time.monotonic() < deadline:
                frames += conn.read_frames()
            assert [(f.id, f.body, f.timestamp, f.attempts) for f in frames if isinstance(f, Message)] == [
                (b"%016d" % i, b"body%d" % i, 1000 + i, i + 1) for i in range(2)]
            assert len(frames) == 3 and isinstance(frames[2], ServerError) and frames[2].code == "E_FIN_FAILED"
            assert conn.read_frames() == []  # the last message is not complete yet
            peer.sendall(wire[-5:])
            deadline = time.monotonic() + 5
            while not (rest := conn.read_frames()) and time.monotonic() < deadline:
                pass
            assert [f.body for f in rest] == [b"body2"]
            peer.settimeout(5)
            received.append(peer.recv(64))
    assert received == [b"NOP\n"]


def test_server_error_fatality() -> None:
    err = ServerError('E_BAD_TOPIC PUB topic name "a!" is not valid')
    assert (err.code, err.description, err.fatal) == ("E_BAD_TOPIC", 'PUB topic name "a!" is not valid', True)
    assert not ServerError("E_FIN_FAILED FIN x failed ID not in flight").fatal


def test_producer_publishes_and_consumer_receives(shared_nsqd: NsqdProcess) -> None:
    topic = unique("cl")
    with Producer(shared_nsqd.tcp_address) as producer:
        producer.pub(topic, b"one")
        producer.mpub(topic, [b"two", b"three"])
        producer.dpub(topic, 50, b"four")
    consumer = Consumer(topic, "ch", nsqd_tcp_addresses=[shared_nsqd.tcp_address], max_in_flight=10)
    got: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(got) < 4 and time.monotonic() < deadline:
        for msg in consumer.poll(0.5):
            assert msg.attempts == 1 and len(msg.id) == 16
            got.append(msg.body)
            assert consumer.fin(msg)
    assert sorted(got) == [b"four", b"one", b"three", b"two"]
    assert consumer.in_flight == 0
    consumer.stop()
    deadline = time.monotonic() + 5
    while not consumer.drained and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.drained
    consumer.close()


def test_connection_primitives(shared_nsqd: NsqdProcess) -> None:
    """SUB, RDY, REQ (redelivery with attempts 2), TOUCH, FIN, a non-fatal error frame, CLS -> CLOSE_WAIT."""
    topic = unique("prim")
    with Producer(shared_nsqd.tcp_address) as producer:
        producer.pub(topic, b"m")
    with Connection(shared_nsqd.tcp_address).connect() as conn:
        reply = conn.identify(client_id="prim-test")
        assert reply["max_rdy_count"] == 2500
        conn.sub(topic, "ch")
        conn.rdy(1)
        [first] = consume(conn, 1)
        conn.touch(first.id)
        conn.req(first.id, 0)
        [again] = consume(conn, 1)
        assert (again.id, again.attempts, again.body) == (first.id, 2, b"m")
        conn.fin(again.id)
        conn.fin(again.id)  # no longer in flight
        frame = conn.read_frame(2)
        assert isinstance(frame, ServerError) and frame.code == "E_FIN_FAILED" and not frame.fatal
        conn.cls()
        assert conn.read_frame(2) == Response(b"CLOSE_WAIT")


def test_heartbeats_are_answered(shared_nsqd: NsqdProcess) -> None:
    """With a 1 s heartbeat nsqd drops a silent client after 2 s; read_frame's NOPs keep it alive."""
    with Connection(shared_nsqd.tcp_address).connect() as conn:
        conn.identify(heartbeat_interval=1000)
        assert conn.read_frame(3.2) is None
        conn.pub(unique("hb"), b"still here")


def test_publish_error_raises_and_producer_recovers(shared_nsqd: NsqdProcess) -> None:
    with Producer(shared_nsqd.tcp_address, retries=0) as producer:
        with pytest.raises(ServerError) as info:
            producer.pub("bad!topic", b"x")
        assert info.value.code == "E_BAD_TOPIC" and info.value.fatal
        with pytest.raises(ServerError, match="E_BAD_MESSAGE"):
            producer.pub(unique("ok"), b"")
        topic = unique("ok")
        producer.pub(topic, b"fine")  # a new connection replaces the one nsqd closed
    assert [m.body for m in drain(shared_nsqd.tcp_port, topic, "ch", idle=0.5)] == [b"fine"]


def test_idle_producer_notices_dropped_connection(shared_nsqd: NsqdProcess) -> None:
    """nsqd closes a publisher that sent nothing for two heartbeat intervals; the next publish reconnects
    before sending (retries=0 proves no retry was needed)."""
    topic = unique("idle")
    with Producer(shared_nsqd.tcp_address, identify={"heartbeat_interval": 1000}, retries=0) as producer:
        producer.pub(topic, b"a")
        time.sleep(2.6)
        producer.pub(topic, b"b")
    assert sorted(m.body for m in drain(shared_nsqd.tcp_port, topic, "ch", idle=0.5)) == [b"a", b"b"]


def test_producer_is_thread_safe(shared_nsqd: NsqdProcess) -> None:
    topic = unique("threads")
    producer = Producer(shared_nsqd.tcp_address)

    def publish(worker: int) -> None:
        for i in range(100):
            producer.pub(topic, f"{worker}-{i}".encode())

    threads = [threading.Thread(target=publish, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.close()
    got = Counter(m.body for m in drain(shared_nsqd.tcp_port, topic, "ch", idle=0.5))
    assert got == Counter(f"{w}-{i}".encode() for w in range(8) for i in range(100))


@pytest.mark.process
def test_producer_reconnects_after_nsqd_restart(tmp_path: Path) -> None:
    nsqd = NsqdProcess(tmp_path / "data").start()
    try:
        topic = unique("restart")
        producer = Producer(nsqd.tcp_address, retries=5, retry_delay=0.2)
        producer.pub(topic, b"before")
        nsqd.stop()
        nsqd.start()
        producer.pub(topic, b"after")
        producer.close()
        assert sorted(m.body for m in drain(nsqd.tcp_port, topic, "ch", idle=0.5)) == [b"after", b"before"]
    finally:
        nsqd.stop()


def test_unreachable_nsqd() -> None:
    with pytest.raises(NSQConnectionError, match="gave up after 2 attempts"):
        Producer(f"127.0.0.1:{free_port()}", retries=1, retry_delay=0.01).pub("t", b"x")
    logs: list[str] = []
    consumer = Consumer("t", "c", nsqd_tcp_addresses=[f"127.0.0.1:{free_port()}"],
                        log=lambda _level, text: logs.append(text))
    assert consumer.connect() == 0
    assert consumer.poll(0.1) == []
    consumer.close()
    assert any("error connecting to nsqd" in line and "re" in line for line in logs), logs


@pytest.mark.parametrize("features", [{"snappy": True}, {"deflate": True, "deflate_level": 3}])
def test_compressed_connections(shared_nsqd: NsqdProcess, features: dict) -> None:
    topic = unique("z")
    bodies = [bytes(range(256)) * 400, b"x" * 200_000, *(f"small-{i}".encode() for i in range(50))]
    with Producer(shared_nsqd.tcp_address, identify=features) as producer:
        producer.mpub(topic, bodies[:2])
        for body in bodies[2:]:
            producer.pub(topic, body)
    with Connection(shared_nsqd.tcp_address).connect() as conn:
        reply = conn.identify(**features)
        assert all(reply[key] == value for key, value in features.items())
        conn.sub(topic, "ch")
        conn.rdy(100)
        got = consume(conn, len(bodies))
        for msg in got:
            conn.fin(msg.id)
    assert Counter(m.body for m in got) == Counter(bodies)


@pytest.fixture(scope="module")
def tls_nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NsqdProcess, ssl.SSLContext]]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    proc = NsqdProcess(tmp_path_factory.mktemp("tlsdata"), f"--tls-cert={pki.server_cert}",
                       f"--tls-key={pki.server_key}", f"--https-address=127.0.0.1:{free_port()}").start()
    yield proc, ssl.create_default_context(cafile=str(pki.ca))
    proc.stop()


@pytest.mark.parametrize("extra", [{}, {"snappy": True}, {"deflate": True}])
def test_tls(tls_nsqd: tuple[NsqdProcess, ssl.SSLContext], extra: dict) -> None:
    nsqd, context = tls_nsqd
    topic = unique("tls")
    with Producer(nsqd.tcp_address, identify={"tls_v1": True, **extra}, tls_context=context) as producer:
        producer.pub(topic, b"secret")
    consumer = Consumer(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], identify={"tls_v1": True, **extra},
                        tls_context=context)
    got: list[Message] = []
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        got = consumer.poll(0.5)
    assert [m.body for m in got] == [b"secret"]
    assert consumer.fin(got[0])
    stats = nsqd.stats(topic=topic)
    [client] = stats["topics"][0]["channels"][0]["clients"]
    assert client["tls"] is True
    consumer.close()


@pytest.fixture
def fake_lookupd() -> Iterator[Callable[[NsqdProcess, list[str]], str]]:
    servers: list[FakeLookupd] = []

    def start(nsqd: NsqdProcess, topics: list[str]) -> str:
        servers.append(FakeLookupd([nsqd], topics))
        return servers[-1].address

    yield start
    for server in servers:
        server.stop()


def test_lookupd_discovery(shared_nsqd: NsqdProcess,
                           fake_lookupd: Callable[[NsqdProcess, list[str]], str]) -> None:
    topic = unique("known")
    lookupd = fake_lookupd(shared_nsqd, [topic, "a"])
    assert lookup_producers(lookupd, topic) == [shared_nsqd.tcp_address]
    assert lookup_producers(lookupd, topic, port="http_port") == [f"127.0.0.1:{shared_nsqd.http_port}"]
    assert lookup_producers(f"http://{lookupd}", "unknown") == []
    assert lookupd_topics([lookupd, fake_lookupd(shared_nsqd, ["b"])]) == sorted(["a", "b", topic])
    with Producer(shared_nsqd.tcp_address) as producer:
        producer.pub(topic, b"via lookupd")
    consumer = Consumer(topic, unique("ch"), lookupd_http_addresses=[lookupd])
    got: list[Message] = []
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        got = consumer.poll(0.5)
    assert consumer.connected() == [shared_nsqd.tcp_address]
    consumer.close()


def test_nsqd_stats_helper(shared_nsqd: NsqdProcess) -> None:
    topic = unique("st")
    with Producer(shared_nsqd.tcp_address) as producer:
        producer.mpub(topic, [b"1", b"2"])
    stats = nsqd_stats(f"127.0.0.1:{shared_nsqd.http_port}", topic)
    [entry] = stats["topics"]
    assert (entry["topic_name"], entry["message_count"]) == (topic, 2)


def test_works_under_gevent_monkey_patching(shared_nsqd: NsqdProcess) -> None:
    topic = unique("gevent")
    script = (
        "from gevent import monkey; monkey.patch_all()\n"
        "import sys; from nsqd_py.client import Producer, Connection, Message\n"
        f"p = Producer({shared_nsqd.tcp_address!r}); p.pub({topic!r}, b'g'); p.close()\n"
        f"c = Connection({shared_nsqd.tcp_address!r}).connect(); c.identify(snappy=True)\n"
        f"c.sub({topic!r}, 'ch'); c.rdy(1); m = c.read_frame(5)\n"
        "assert isinstance(m, Message) and m.body == b'g', m; c.fin(m.id); c.close(); print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "ok", out.stderr
