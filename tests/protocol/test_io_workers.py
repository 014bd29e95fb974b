"""NSQD_PY_IO_WORKERS=N: TCP clients served by worker processes, topics and channels in the broker (issue 37).

The rest of the protocol, client, security and durability suites run in this mode too (`make test` runs them
again with the variable set); these tests cover what only this mode has: the processes, /stats gathered across
them, a worker that dies, and a clean stop with messages in flight in the workers' clients.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from nsqd_py.config.worker_count import IO_WORKERS_ENV, io_worker_count
from tests.support import FRAME_RESPONSE, NSQD_BIN, NsqdProcess, RawConn, drain, unique, wait_until

pytestmark = pytest.mark.process


@pytest.fixture
def workers_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(IO_WORKERS_ENV, "2")


def _workers(nsqd: NsqdProcess) -> list[int]:
    """The pids of nsqd's I/O worker processes."""
    assert nsqd.proc is not None
    out = subprocess.run(["pgrep", "-P", str(nsqd.proc.pid), "-f", "nsqd_py.daemon.worker_process"],
                         capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def _consumer(nsqd: NsqdProcess, topic: str, channel: str, **identify: object) -> RawConn:
    conn = nsqd.connect()
    conn.identify(output_buffer_timeout=-1, **identify)
    assert conn.sub(topic, channel) == (FRAME_RESPONSE, b"OK")
    return conn


def test_the_count_is_read_from_the_environment() -> None:
    assert io_worker_count({}) == 0
    assert io_worker_count({IO_WORKERS_ENV: " 3 "}) == 3
    with pytest.raises(ValueError, match="0 or more"):
        io_worker_count({IO_WORKERS_ENV: "-1"})
    with pytest.raises(ValueError):
        io_worker_count({IO_WORKERS_ENV: "two"})


def test_a_bad_count_stops_start_up_with_a_reason(tmp_path: Path) -> None:
    result = subprocess.run([str(NSQD_BIN), f"--data-path={tmp_path}", "--tcp-address=127.0.0.1:0",
                             "--http-address=127.0.0.1:0"], env={**os.environ, IO_WORKERS_ENV: "-2"},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert f"FATAL: failed to instantiate nsqd - {IO_WORKERS_ENV} must be 0 or more, not -2" in result.stderr


def test_stats_count_every_client_of_every_worker(workers_env: None, nsqd_factory) -> None:
    nsqd = nsqd_factory()
    assert len(_workers(nsqd)) == 2
    topic = unique("stats")
    consumers = [_consumer(nsqd, topic, "c", client_id=f"consumer{i}", user_agent="test/1") for i in range(6)]
    producers = [nsqd.connect() for _ in range(3)]
    for i, producer in enumerate(producers):
        for _ in range(i + 1):
            producer.send(f"PUB {topic}", b"x")
            assert producer.frame() == (FRAME_RESPONSE, b"OK")
    stats = nsqd.stats(topic=topic)
    channel = stats["topics"][0]["channels"][0]
    assert channel["client_count"] == 6
    assert sorted(client["client_id"] for client in channel["clients"]) == [f"consumer{i}" for i in range(6)]
    assert {client["user_agent"] for client in channel["clients"]} == {"test/1"}
    assert sorted(p["pub_counts"][0]["count"] for p in stats["producers"] if p.get("pub_counts")) == [1, 2, 3]
    for conn in consumers + producers:
        conn.close()
    wait_until(lambda: nsqd.stats(topic=topic)["topics"][0]["channels"][0]["client_count"] == 0)


def test_a_worker_that_dies_is_replaced_and_its_messages_come_back(workers_env: None, nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = unique("crash")
    first = _consumer(nsqd, topic, "c", msg_timeout=1000)
    first.send("RDY 1")
    producer = nsqd.connect()
    producer.send(f"PUB {topic}", b"in flight")
    assert producer.frame() == (FRAME_RESPONSE, b"OK")
    assert first.message().body == b"in flight"
    before = _workers(nsqd)
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    assert first.is_closed()
    wait_until(lambda: len(_workers(nsqd)) == 2 and not set(_workers(nsqd)) & set(before))
    got = drain(nsqd.tcp_port, topic, "c", idle=2.0)
    assert [(m.body, m.attempts) for m in got] == [(b"in flight", 2)]
    assert "Traceback" not in nsqd.log()
    assert "I/O worker" in nsqd.log()


def test_sigterm_keeps_what_the_workers_clients_had(workers_env: None, nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    nsqd = nsqd_factory(data_path=data)
    topic = unique("term")
    consumer = _consumer(nsqd, topic, "c")
    consumer.send("RDY 3")
    producer = nsqd.connect()
    for i in range(10):
        producer.send(f"PUB {topic}", b"m%d" % i)
        assert producer.frame() == (FRAME_RESPONSE, b"OK")
    in_flight = [consumer.message() for _ in range(3)]
    workers = _workers(nsqd)
    assert nsqd.stop() == 0
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    again = nsqd_factory(data_path=data)
    got = drain(again.tcp_port, topic, "c")
    assert sorted(m.body for m in got) == [b"m%d" % i for i in range(10)]
    assert {m.id for m in in_flight} <= {m.id for m in got}


def test_a_workers_own_error_waits_for_the_brokers_answers_before_it(workers_env: None, nsqd_factory) -> None:
    """Pipelined PUBs (answered by the broker), then one the worker refuses itself: every OK, then the error, then
    the connection closes, and the server goes on serving."""
    nsqd = nsqd_factory()
    conn = nsqd.connect()
    conn.send_raw(b"".join(b"PUB ok\n\x00\x00\x00\x01x" for _ in range(50)) + b"PUB bad!\n\x00\x00\x00\x01x")
    for _ in range(50):
        assert conn.frame() == (FRAME_RESPONSE, b"OK")
    assert conn.frame()[1].startswith(b"E_BAD_TOPIC")
    assert conn.is_closed()
    other = nsqd.connect()
    other.send("PUB ok", b"y")
    assert other.frame() == (FRAME_RESPONSE, b"OK")
    assert nsqd.stats(topic="ok")["topics"][0]["message_count"] == 51
