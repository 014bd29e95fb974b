"""Drain mode (beyond nsqd, issue 45 item 5, RFC nsqio/nsq#1302) against the real nsqd process over real sockets:
--sigterm=drain, PUT /config/drain and /config/shutdown, the refusals over TCP and HTTP, /info and /ping, the
exit once consumers have the rest, and the default left as Go's clean shutdown."""

from __future__ import annotations

import signal
import struct
import subprocess
from pathlib import Path

import pytest

from nsqd_py.config.worker_count import IO_WORKERS_ENV
from tests.support import (
    FRAME_ERROR,
    FRAME_MESSAGE,
    FRAME_RESPONSE,
    NSQD_BIN,
    NsqdProcess,
    RawConn,
    channel_stats,
    unique,
    wait_until,
)

pytestmark = pytest.mark.process

#: generous: the machine is shared with other test runs
EXIT_TIMEOUT = 60


def _channel(nsqd: NsqdProcess, topic: str, channel: str = "c") -> None:
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel={channel}").status == 200


def _mpub(nsqd: NsqdProcess, topic: str, bodies: list[bytes]) -> None:
    assert nsqd.request("POST", f"/mpub?topic={topic}", b"\n".join(bodies)).status == 200


def _mpub_frame(conn: RawConn, topic: str, bodies: list[bytes]) -> tuple[int, bytes]:
    payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    conn.send(f"MPUB {topic}", payload)
    return conn.frame()


def _consumer(nsqd: NsqdProcess, topic: str, channel: str = "c") -> RawConn:
    conn = nsqd.connect(timeout=EXIT_TIMEOUT)
    conn.identify(output_buffer_timeout=-1)
    assert conn.sub(topic, channel) == (FRAME_RESPONSE, b"OK")
    return conn


def _draining(nsqd: NsqdProcess) -> bool:
    return nsqd.request("GET", "/info").json().get("draining") is True


def _exit_code(nsqd: NsqdProcess) -> int:
    assert nsqd.process is not None
    return nsqd.process.wait(EXIT_TIMEOUT)


def _take_all(conn: RawConn, count: int) -> list[bytes]:
    """Receive and FIN ``count`` messages."""
    bodies = []
    while len(bodies) < count:
        msg = conn.message()
        bodies.append(msg.body)
        conn.send(b"FIN " + msg.id)
    return bodies


def _left_after_restart(nsqd_factory, data_path: Path, topic: str) -> int:
    """What the channel holds once an nsqd (clean-shutdown) is started again on the data dir."""
    again = nsqd_factory(data_path=data_path)
    row = channel_stats(again, topic, "c")
    return row["depth"] + row["deferred_count"] + row["in_flight_count"]


def test_sigterm_drain_waits_for_the_consumer_then_exits_0_with_nothing_lost(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "sigterm-drain"
    nsqd = nsqd_factory("--sigterm=drain", "--mem-queue-size=5", data_path=data)  # most of them on disk
    topic = unique("drain")
    _channel(nsqd, topic)
    sent = [f"m{i}".encode() for i in range(40)]
    _mpub(nsqd, topic, sent)
    conn = _consumer(nsqd, topic)
    conn.send("RDY 1")
    held = conn.message()  # in flight, not finished
    assert nsqd.process is not None
    nsqd.process.send_signal(signal.SIGTERM)
    wait_until(lambda: _draining(nsqd), what="the drain")
    assert nsqd.process.poll() is None  # 39 queued and one in flight: it keeps serving
    assert "NSQ: drained" not in nsqd.log()
    conn.send(b"REQ " + held.id + b" 0")  # a requeue comes back, and is waited for too
    conn.send("RDY 10")
    got = _take_all(conn, len(sent))
    assert _exit_code(nsqd) == 0
    assert sorted(got) == sorted(sent)
    log = nsqd.log()
    assert "NSQ: draining - refusing new messages, topics and channels" in log
    assert "NSQ: drained\n" in log
    assert log.index("NSQ: drained") < log.index("NSQ: closing topics") < log.index("NSQ: bye")
    assert _left_after_restart(nsqd_factory, data, topic) == 0


def test_put_config_drain_refuses_new_messages_and_keeps_the_connection(nsqd_factory) -> None:
    nsqd = nsqd_factory("--sigterm=drain")  # drain mode on: the PUTs act
    topic, new = unique("refused"), unique("new")
    _channel(nsqd, topic)
    _mpub(nsqd, topic, [b"left"])
    publisher = nsqd.connect()
    publisher.identify()
    reply = nsqd.request("PUT", "/config/drain")
    assert (reply.status, reply.body) == (200, b"")
    assert _draining(nsqd)

    publisher.send(f"PUB {topic}", b"x")
    assert publisher.frame() == (FRAME_ERROR, b"E_PUB_FAILED PUB failed nsqd is draining")
    publisher.send(f"DPUB {topic} 1000", b"x")
    assert publisher.frame() == (FRAME_ERROR, b"E_DPUB_FAILED DPUB failed nsqd is draining")
    assert _mpub_frame(publisher, topic, [b"x", b"y"]) == (FRAME_ERROR, b"E_MPUB_FAILED MPUB failed nsqd is draining")
    assert _mpub_frame(publisher, new, [b"x"]) == (FRAME_ERROR, b"E_MPUB_FAILED MPUB failed nsqd is draining")
    publisher.send(f"PUB {new}", b"x")
    assert publisher.frame() == (FRAME_ERROR, b"E_PUB_FAILED PUB failed nsqd is draining")
    publisher.send("NOP")
    assert not publisher.is_closed(wait=0.5)  # every refusal kept the connection

    for target in (f"/pub?topic={topic}", f"/pub?topic={topic}&defer=10", f"/mpub?topic={topic}",
                   f"/pub?topic={new}", f"/mpub?topic={new}"):
        reply = nsqd.request("POST", target, b"x")
        assert (reply.status, reply.json()) == (503, {"message": "DRAINING"}), target
    assert channel_stats(nsqd, topic, "c")["depth"] == 1
    assert [t["topic_name"] for t in nsqd.stats()["topics"]] == [topic]  # no new topic

    publisher.close()
    conn = _consumer(nsqd, topic)
    conn.send("RDY 1")
    assert _take_all(conn, 1) == [b"left"]
    assert _exit_code(nsqd) == 0


def test_new_topics_and_channels_are_refused_existing_ones_subscribable(nsqd_factory) -> None:
    nsqd = nsqd_factory("--sigterm=drain")
    topic = unique("topics")
    _channel(nsqd, topic)
    _mpub(nsqd, topic, [b"one"])
    assert nsqd.request("PUT", "/config/drain").status == 200
    new_topic = nsqd.request("POST", f"/topic/create?topic={unique('new')}")
    assert (new_topic.status, new_topic.json()) == (503, {"message": "DRAINING"})
    new_channel = nsqd.request("POST", f"/channel/create?topic={topic}&channel=other")
    assert (new_channel.status, new_channel.json()) == (503, {"message": "DRAINING"})
    assert nsqd.request("POST", f"/topic/create?topic={topic}").status == 200  # exists: nothing to create
    assert nsqd.request("POST", f"/channel/create?topic={topic}&channel=c").status == 200

    for sub_topic, sub_channel in ((topic, "other"), (unique("new"), "c")):
        conn = nsqd.connect()
        conn.identify()
        assert conn.sub(sub_topic, sub_channel) == (FRAME_ERROR, b"E_SUB_FAILED SUB failed nsqd is draining")
        assert conn.is_closed()  # as every E_SUB_FAILED
    assert [c["channel_name"] for c in nsqd.stats(topic)["topics"][0]["channels"]] == ["c"]

    conn = _consumer(nsqd, topic)
    conn.send("RDY 1")
    assert _take_all(conn, 1) == [b"one"]
    assert _exit_code(nsqd) == 0


def test_info_and_ping_show_the_drain(nsqd_factory) -> None:
    nsqd = nsqd_factory("--sigterm=drain")  # drain mode on: the PUTs act
    topic = unique("status")
    _channel(nsqd, topic)
    _mpub(nsqd, topic, [b"keeps it draining"])
    before = nsqd.request("GET", "/info").json()
    assert "draining" not in before
    ping = nsqd.request("GET", "/ping")
    assert (ping.status, ping.body) == (200, b"OK")
    assert nsqd.request("PUT", "/config/drain").status == 200
    assert nsqd.request("PUT", "/config/drain").status == 200  # again: it goes on
    during = nsqd.request("GET", "/info").json()
    assert list(during) == [*before, "draining"]
    assert during["draining"] is True
    ping = nsqd.request("GET", "/ping")
    assert (ping.status, ping.body, ping.header("Content-Type")) == (503, b"NOK - draining",
                                                                      "text/plain; charset=utf-8")
    assert nsqd.request("PUT", "/config/shutdown").status == 200
    assert _exit_code(nsqd) == 0


def test_put_config_shutdown_stops_at_once_and_keeps_everything(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "shutdown"
    nsqd = nsqd_factory("--sigterm=drain", data_path=data)
    topic = unique("shutdown")
    _channel(nsqd, topic)
    _mpub(nsqd, topic, [b"a", b"b", b"c"])
    assert nsqd.request("PUT", "/config/drain").status == 200
    reply = nsqd.request("PUT", "/config/shutdown")
    assert (reply.status, reply.body) == (200, b"")
    assert _exit_code(nsqd) == 0
    log = nsqd.log()
    assert "NSQ: shutdown requested (PUT /config/shutdown)" in log and "NSQ: bye" in log
    assert "NSQ: drained" not in log
    assert _left_after_restart(nsqd_factory, data, topic) == 3


def test_deferred_messages_do_not_hold_the_drain_and_stay_for_the_next_start(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "deferred"
    nsqd = nsqd_factory("--sigterm=drain", data_path=data)
    topic = unique("deferred")
    _channel(nsqd, topic)
    assert nsqd.request("POST", f"/pub?topic={topic}&defer=3600000", b"later").status == 200
    _mpub(nsqd, topic, [b"now"])
    conn = _consumer(nsqd, topic)
    conn.send("RDY 5")
    assert nsqd.process is not None
    nsqd.process.send_signal(signal.SIGTERM)
    assert _take_all(conn, 1) == [b"now"]
    assert _exit_code(nsqd) == 0
    assert "NSQ: drained - 1 deferred, paused or unsubscribed messages left for the next start" in nsqd.log()
    assert _left_after_restart(nsqd_factory, data, topic) == 1


def test_the_default_sigterm_is_still_a_clean_shutdown(nsqd_factory, tmp_path: Path) -> None:
    data = tmp_path / "default"
    nsqd = nsqd_factory(data_path=data)
    topic = unique("default")
    _channel(nsqd, topic)
    _mpub(nsqd, topic, [b"kept"])
    config = nsqd.request("GET", "/config/sigterm")
    assert (config.status, config.body) == (200, b"clean-shutdown")
    for opt in ("drain", "shutdown"):
        assert nsqd.request("GET", f"/config/{opt}").json() == {"message": "INVALID_OPTION"}
    put = nsqd.request("PUT", "/config/sigterm", b"drain")  # not settable, as every option but two in Go
    assert (put.status, put.json()) == (400, {"message": "INVALID_OPTION"})
    assert nsqd.stop() == 0
    assert "draining" not in nsqd.log()
    assert _left_after_restart(nsqd_factory, data, topic) == 1


def test_toml_key_and_a_bad_value(nsqd_factory, tmp_path: Path) -> None:
    config = tmp_path / "nsqd.toml"
    config.write_text('sigterm = "drain"\n')
    nsqd = nsqd_factory(f"--config={config}")
    assert nsqd.request("GET", "/config/sigterm").body == b"drain"
    assert nsqd.stop(sig=signal.SIGINT) == 0  # SIGINT stays a clean shutdown
    (tmp_path / "bad.toml").write_text('sigterm = "Drain"\n')
    for args in (["--sigterm=bogus"], [f"--config={tmp_path / 'bad.toml'}"]):
        run = subprocess.run([str(NSQD_BIN), f"--data-path={tmp_path}", *args], capture_output=True, text=True,
                             timeout=30)
        assert run.returncode == 1
        assert "FATAL: failed to instantiate nsqd - --sigterm must be clean-shutdown or drain" in run.stderr


@pytest.mark.slow
def test_drain_with_io_workers(nsqd_factory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(IO_WORKERS_ENV, "2")
    data = tmp_path / "workers"
    nsqd = nsqd_factory("--sigterm=drain", "--mem-queue-size=5", data_path=data)
    topic = unique("workers")
    _channel(nsqd, topic)
    sent = [f"w{i}".encode() for i in range(30)]
    _mpub(nsqd, topic, sent)
    assert nsqd.process is not None
    nsqd.process.send_signal(signal.SIGTERM)
    wait_until(lambda: _draining(nsqd), what="the drain")
    publishers = [nsqd.connect() for _ in range(4)]  # spread over both workers
    for publisher in publishers:
        publisher.identify()
        publisher.send(f"PUB {topic}", b"x")
        assert publisher.frame() == (FRAME_ERROR, b"E_PUB_FAILED PUB failed nsqd is draining")
        assert _mpub_frame(publisher, unique("new"), [b"x"]) == (FRAME_ERROR,
                                                                  b"E_MPUB_FAILED MPUB failed nsqd is draining")
        publisher.send(f"PUB {topic}", b"y")
        assert publisher.frame()[0] == FRAME_ERROR  # still open, still refused
    refused = nsqd.connect()
    refused.identify()
    assert refused.sub(topic, "new") == (FRAME_ERROR, b"E_SUB_FAILED SUB failed nsqd is draining")
    conn = _consumer(nsqd, topic)
    conn.send("RDY 7")
    got = _take_all(conn, len(sent))
    assert _exit_code(nsqd) == 0
    assert sorted(got) == sorted(sent)
    monkeypatch.delenv(IO_WORKERS_ENV)
    assert _left_after_restart(nsqd_factory, data, topic) == 0


def test_a_connected_consumer_sees_no_change_until_the_close(nsqd_factory) -> None:
    """A drain changes nothing on a consumer's connection: messages, then nsqd's close at the end."""
    nsqd = nsqd_factory("--sigterm=drain")  # drain mode on: the PUTs act
    topic = unique("frames")
    _channel(nsqd, topic)
    _mpub(nsqd, topic, [b"only"])
    conn = _consumer(nsqd, topic)
    assert nsqd.request("PUT", "/config/drain").status == 200
    conn.send("RDY 1")
    ftype, data = conn.frame()
    assert ftype == FRAME_MESSAGE and data.endswith(b"only")
    conn.send(b"FIN " + data[10:26])
    assert _exit_code(nsqd) == 0
    assert conn.is_closed(wait=EXIT_TIMEOUT)


def test_without_drain_mode_the_puts_get_nsqds_answers(nsqd_factory) -> None:
    """Nothing set: PUT /config/drain and /config/shutdown are unknown options, as in Go nsqd 1.3.0."""
    nsqd = nsqd_factory()
    for opt in ("drain", "shutdown"):
        assert (nsqd.request("PUT", f"/config/{opt}").status, nsqd.request("PUT", f"/config/{opt}").json()) == (
            413, {"message": "INVALID_VALUE"})
        reply = nsqd.request("PUT", f"/config/{opt}", b"now")
        assert (reply.status, reply.json()) == (400, {"message": "INVALID_OPTION"})
    assert nsqd.request("GET", "/ping").body == b"OK"
    assert "draining" not in nsqd.log()
