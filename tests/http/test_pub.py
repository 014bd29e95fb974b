"""POST /pub and /mpub: every error row of nsqd's table, check order, limits, and what reaches consumers."""

from __future__ import annotations

import struct
import time

import pytest

from nsqd_py.client.protocol import mpub_body
from tests.http.http_support import NsqdFactory, raw_exchange
from tests.inprocess import InProcessNsqd, Nsqd
from tests.support import FRAME_RESPONSE, NsqdProcess, RawConn, Reply, wait_until

JSON = "application/json; charset=utf-8"


def _ok(reply: Reply) -> None:
    assert (reply.status, reply.body) == (200, b"OK")
    assert reply.header("Content-Type") == "text/plain; charset=utf-8"
    assert reply.header("X-Nsq-Content-Type") == "nsq; version=1.0"


def _error(reply: Reply, status: int, text: str) -> None:
    assert (reply.status, reply.body) == (status, b'{"message":"' + text.encode() + b'"}')
    assert reply.header("Content-Type") == JSON


def _subscriber(nsqd: Nsqd, topic: str, rdy: int = 100) -> RawConn:
    conn = nsqd.connect()
    conn.identify()
    assert conn.sub(topic, "c") == (FRAME_RESPONSE, b"OK")
    conn.send(f"RDY {rdy}")
    return conn


def _topic_stats(nsqd: Nsqd, topic: str) -> dict | None:
    topics = nsqd.stats(topic=topic)["topics"]
    return topics[0] if topics else None


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> NsqdProcess:
    """An nsqd with tiny limits: 100-byte messages, 1000-byte bodies, 10 s max defer."""
    proc = NsqdProcess(tmp_path_factory.mktemp("small"), "--max-msg-size=100", "--max-body-size=1000",
                       "--max-req-timeout=10s").start()
    yield proc
    proc.stop()


# ---- /pub ---------------------------------------------------------------------------------------------------


def test_pub_delivers_the_body(inproc: InProcessNsqd) -> None:
    conn = _subscriber(inproc, "pub_deliver")
    _ok(inproc.request("POST", "/pub?topic=pub_deliver", b"hello \x00\xff world"))
    before = time.time_ns()
    msg = conn.message()
    assert msg.body == b"hello \x00\xff world" and msg.attempts == 1
    assert abs(msg.timestamp - before) < 5e9


@pytest.mark.parametrize(("target", "body", "status", "text"), [
    ("/pub", b"x", 400, "MISSING_ARG_TOPIC"),
    ("/pub?topic=bad!name", b"x", 400, "INVALID_TOPIC"),
    ("/pub?topic=", b"x", 400, "INVALID_TOPIC"),
    ("/pub?topic=" + "a" * 65, b"x", 400, "INVALID_TOPIC"),
    ("/pub?topic=%ff", b"x", 400, "INVALID_TOPIC"),
    ("/pub?topic=t_pub_err", b"", 400, "MSG_EMPTY"),
    ("/pub", b"", 400, "MSG_EMPTY"),  # the body is judged before the topic
    ("/pub?topic=t_pub_err&defer=abc", b"x", 400, "INVALID_DEFER"),
    ("/pub?topic=t_pub_err&defer=-1", b"x", 400, "INVALID_DEFER"),
    ("/pub?topic=t_pub_err&defer=1.5", b"x", 400, "INVALID_DEFER"),
    ("/pub?topic=t_pub_err&defer=", b"x", 400, "INVALID_DEFER"),
    ("/pub?topic=t_pub_err&defer=600001", b"x", 400, "INVALID_DEFER"),  # --max-req-timeout=10m
    ("/pub?topic=t_pub_err&defer=99999999999999999999", b"x", 400, "INVALID_DEFER"),
    ("/pub?topic=t_pub_err&x=%zz", b"x", 400, "INVALID_REQUEST"),
    ("/pub?topic=t_pub_err;x", b"x", 400, "INVALID_REQUEST"),
])
def test_pub_errors(inproc: InProcessNsqd, target: str, body: bytes, status: int, text: str) -> None:
    _error(inproc.request("POST", target, body), status, text)


def test_pub_without_a_body_at_all_is_empty(inproc: InProcessNsqd) -> None:
    _error(inproc.request("POST", "/pub?topic=t_nobody"), 400, "MSG_EMPTY")


@pytest.mark.parametrize("defer", ["0", "600000", "%2B5", "18446744073710"])
def test_pub_defer_accepts_what_nsqd_accepts(inproc: InProcessNsqd, defer: str) -> None:
    """The last one overflows int64 nanoseconds and wraps to 448384 ns, which nsqd accepts too."""
    _ok(inproc.request("POST", f"/pub?topic=t_defer_ok&defer={defer}", b"x"))


def test_pub_creates_the_topic_before_checking_defer(inproc: InProcessNsqd) -> None:
    _error(inproc.request("POST", "/pub?topic=t_made_anyway&defer=x", b"x"), 400, "INVALID_DEFER")
    assert _topic_stats(inproc, "t_made_anyway") is not None


def test_pub_defer_holds_the_message_back(inproc: InProcessNsqd) -> None:
    conn = _subscriber(inproc, "t_deferred")
    start = time.time()
    _ok(inproc.request("POST", "/pub?topic=t_deferred&defer=3000", b"later"))
    channel = _topic_stats(inproc, "t_deferred")["channels"][0]
    assert channel["deferred_count"] == 1
    assert conn.message().body == b"later"
    assert time.time() - start >= 2.9


def test_http_publishers_are_not_producers(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory()
    _ok(nsqd.request("POST", "/pub?topic=t", b"x"))
    assert nsqd.stats()["producers"] is None


def test_pub_size_limits(small: NsqdProcess) -> None:
    _ok(small.request("POST", "/pub?topic=t_size", b"x" * 100))
    _error(small.request("POST", "/pub?topic=t_size", b"x" * 101), 413, "MSG_TOO_BIG")
    _error(small.request("POST", "/pub?topic=bad!", b"x" * 101), 413, "MSG_TOO_BIG")  # size before topic


def test_pub_size_limit_without_content_length(small: NsqdProcess) -> None:
    chunked = [("Transfer-Encoding", "chunked")]
    _error(small.request("POST", "/pub?topic=t_size", _chunks(b"x" * 101), chunked), 413, "MSG_TOO_BIG")
    _ok(small.request("POST", "/pub?topic=t_size", _chunks(b"x" * 100), chunked))


def test_pub_limit_is_not_fooled_by_a_small_content_length(small: NsqdProcess) -> None:
    """Only Content-Length bytes are the body; what follows is a broken next request, not a bigger message."""
    data = b"POST /pub?topic=t_lie HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" + b"z" * 500 + b"\r\n\r\n"
    replies = raw_exchange(small.http_port, data)
    assert replies.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\n\r\nOKHTTP/1.1 400 Bad Request\r\n" in replies
    assert _topic_stats(small, "t_lie")["message_bytes"] == 3


def test_defer_range_follows_max_req_timeout(small: NsqdProcess) -> None:
    _ok(small.request("POST", "/pub?topic=t_d&defer=10000", b"x"))
    _error(small.request("POST", "/pub?topic=t_d&defer=10001", b"x"), 400, "INVALID_DEFER")


def _chunks(data: bytes, size: int = 7) -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + size]), data[i:i + size]) for i in range(0, len(data), size))
    return out + b"0\r\n\r\n"


# ---- /mpub --------------------------------------------------------------------------------------------------


def test_mpub_text_splits_on_newline_only(inproc: InProcessNsqd) -> None:
    conn = _subscriber(inproc, "t_mpub_text")
    _ok(inproc.request("POST", "/mpub?topic=t_mpub_text", b"one\ntwo\r\n\n\nthree"))
    assert [conn.message().body for _ in range(3)] == [b"one", b"two\r", b"three"]
    assert _topic_stats(inproc, "t_mpub_text")["message_count"] == 3


@pytest.mark.parametrize("body", [b"", b"\n", b"\n\n\n"])
def test_mpub_text_with_nothing_in_it_is_ok_and_publishes_nothing(inproc: InProcessNsqd, body: bytes) -> None:
    _ok(inproc.request("POST", "/mpub?topic=t_mpub_none", body))
    assert _topic_stats(inproc, "t_mpub_none")["message_count"] == 0


@pytest.mark.parametrize("flag", ["true", "1", "yes", ""])
def test_mpub_binary(inproc: InProcessNsqd, flag: str) -> None:
    topic = f"t_mpub_bin_{flag or 'empty'}"
    conn = _subscriber(inproc, topic)
    bodies = [b"a\nb", b"\x00" * 3]
    _ok(inproc.request("POST", f"/mpub?topic={topic}&binary={flag}", mpub_body(bodies)))
    assert [conn.message().body for _ in bodies] == bodies


def test_mpub_binary_deprecated_value_is_logged(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory()
    _ok(nsqd.request("POST", "/mpub?topic=t&binary=yes", mpub_body([b"x"])))
    assert "WARNING: deprecated value 'yes' used for /mpub binary param" in nsqd.log()


@pytest.mark.parametrize("flag", ["false", "0"])
def test_mpub_binary_false_means_text(inproc: InProcessNsqd, flag: str) -> None:
    _ok(inproc.request("POST", f"/mpub?topic=t_mpub_txt_{flag}&binary={flag}", b"a\nb"))
    assert _topic_stats(inproc, f"t_mpub_txt_{flag}")["message_count"] == 2


@pytest.mark.parametrize(("body", "text"), [
    (b"", "BAD_BODY"),
    (b"\x00\x00", "BAD_BODY"),
    (struct.pack(">i", 0), "BAD_BODY"),
    (struct.pack(">i", -1), "BAD_BODY"),
    (struct.pack(">i", 2) + struct.pack(">i", 5) + b"hello" + b"\x00\x00", "BAD_MESSAGE"),  # golden 15
    (struct.pack(">ii", 1, 0), "BAD_MESSAGE"),
    (struct.pack(">ii", 1, -5), "BAD_MESSAGE"),
    (struct.pack(">ii", 1, 10) + b"short", "BAD_MESSAGE"),
])
def test_mpub_binary_errors_are_413(inproc: InProcessNsqd, body: bytes, text: str) -> None:
    _error(inproc.request("POST", "/mpub?topic=t_mpub_bad&binary=true", body), 413, text)


def test_mpub_binary_ignores_trailing_bytes(inproc: InProcessNsqd) -> None:
    _ok(inproc.request("POST", "/mpub?topic=t_mpub_trail&binary=1", mpub_body([b"x"]) + b"junk"))
    assert _topic_stats(inproc, "t_mpub_trail")["message_count"] == 1


@pytest.mark.parametrize(("target", "status", "text"), [
    ("/mpub", 400, "MISSING_ARG_TOPIC"),
    ("/mpub?topic=bad!name", 400, "INVALID_TOPIC"),
    ("/mpub?topic=t&x=%z", 400, "INVALID_REQUEST"),
])
def test_mpub_topic_errors(inproc: InProcessNsqd, target: str, status: int, text: str) -> None:
    _error(inproc.request("POST", target, b"a\nb"), status, text)


def test_mpub_creates_the_topic_before_reading_the_body(inproc: InProcessNsqd) -> None:
    reply = inproc.request("POST", "/mpub?topic=t_mpub_made&binary=true", b"")
    _error(reply, 413, "BAD_BODY")
    assert _topic_stats(inproc, "t_mpub_made")["message_count"] == 0


def test_mpub_limits(small: NsqdProcess) -> None:
    fits = b"\n".join([b"x" * 99] * 10)  # 999 bytes
    _ok(small.request("POST", "/mpub?topic=t_ml", fits))
    _error(small.request("POST", "/mpub?topic=t_ml", fits + b"\n\n"), 413, "BODY_TOO_BIG")
    _error(small.request("POST", "/mpub?topic=bad!", fits + b"\n\n"), 413, "BODY_TOO_BIG")  # size before topic
    _error(small.request("POST", "/mpub?topic=t_ml", b"x" * 101), 413, "MSG_TOO_BIG")
    _error(small.request("POST", "/mpub?topic=t_ml", b"a\n" + b"x" * 101 + b"\nb"), 413, "MSG_TOO_BIG")
    _error(small.request("POST", "/mpub?topic=t_ml&binary=1", mpub_body([b"x" * 101])), 413, "BAD_MESSAGE")
    _error(small.request("POST", "/mpub?topic=t_ml&binary=1", struct.pack(">i", 200)), 413, "BAD_BODY")
    assert _topic_stats(small, "t_ml")["message_count"] == 10, "a failed /mpub publishes nothing"


def test_mpub_limits_without_content_length(small: NsqdProcess) -> None:
    chunked = [("Transfer-Encoding", "chunked")]
    lines = b"\n".join([b"x" * 99] * 11)
    _error(small.request("POST", "/mpub?topic=t_mlc", _chunks(lines, 64), chunked), 413, "BODY_TOO_BIG")
    long_line_first = b"a\n" + b"x" * 101 + b"\n" + b"y\n" * 500
    _error(small.request("POST", "/mpub?topic=t_mlc", _chunks(long_line_first, 64), chunked), 413, "MSG_TOO_BIG")
    # nsqd would read a chunked binary body of any length here; we stop at --max-body-size (a documented choice)
    binary = _chunks(mpub_body([b"x" * 10] * 150))
    _error(small.request("POST", "/mpub?topic=t_mlc&binary=1", binary, chunked), 413, "BODY_TOO_BIG")
    assert _topic_stats(small, "t_mlc")["message_count"] == 0


def test_consumer_sees_http_and_tcp_publishes_in_order(inproc: InProcessNsqd) -> None:
    conn = _subscriber(inproc, "t_mixed")
    producer = inproc.connect()
    _ok(inproc.request("POST", "/pub?topic=t_mixed", b"1"))
    producer.send("PUB t_mixed", b"2")
    assert producer.frame() == (FRAME_RESPONSE, b"OK")
    _ok(inproc.request("POST", "/mpub?topic=t_mixed", b"3\n4"))
    assert [conn.message().body for _ in range(4)] == [b"1", b"2", b"3", b"4"]
    wait_until(lambda: _topic_stats(inproc, "t_mixed")["channels"][0]["in_flight_count"] == 4)


def test_a_failing_disk_write_is_503_exiting_and_unhealthy(nsqd_factory: NsqdFactory) -> None:
    """With every message on disk and one file per message, the next data file's path is made a directory."""
    nsqd = nsqd_factory("--mem-queue-size=0", "--max-bytes-per-file=1")
    _ok(nsqd.request("POST", "/pub?topic=t503", b"x"))
    blocker = nsqd.data_path / "t503.diskqueue.000001.dat"
    blocker.mkdir()
    _error(nsqd.request("POST", "/pub?topic=t503", b"x"), 503, "EXITING")
    _error(nsqd.request("POST", "/mpub?topic=t503", b"a\nb"), 503, "EXITING")
    ping = nsqd.request("GET", "/ping")
    assert ping.status == 500 and ping.body.startswith(b"NOK - ")
    assert ping.header("Content-Type") == "text/plain; charset=utf-8" and ping.header("X-Nsq-Content-Type") is None
    assert nsqd.stats()["health"].startswith("NOK - ")
    assert "INFO: 500 GET /ping (" in nsqd.log()
    blocker.rmdir()
    _ok(nsqd.request("POST", "/pub?topic=t503", b"x"))
    assert nsqd.request("GET", "/ping").body == b"OK"
