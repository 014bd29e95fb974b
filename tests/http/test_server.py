"""The HTTP server itself: access log, connection handling, hostile clients, curl, TLS-required."""

from __future__ import annotations

import http.client
import re
import shutil
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.http.http_support import NsqdFactory, parse_raw_reply, raw_exchange
from tests.support import NsqdProcess, request, wait_until

ACCESS_LINE = re.compile(r"^\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} INFO: (\d{3}) (\S+) (\S+) "
                         r"\(127\.0\.0\.1:\d+\) \d+(?:\.\d+)?(?:ns|µs|ms|s)$", re.M)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> NsqdProcess:
    proc = NsqdProcess(tmp_path_factory.mktemp("small"), "--max-msg-size=1000").start()
    yield proc
    proc.stop()


def _conn(port: int, timeout: float = 5) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def _read_reply(sock: socket.socket) -> http.client.HTTPResponse:
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    resp.read()
    return resp


# ---- access log ---------------------------------------------------------------------------------------------


def test_access_log_lines(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory()
    port = nsqd.http_port
    request(port, "GET", "/info")
    request(port, "GET", "/stats?format=json&topic=zz")
    request(port, "POST", "/topic/create?topic=bad!")
    request(port, "POST", "/pub?topic=quiet", b"x")
    request(port, "POST", "/mpub?topic=quiet", b"x")
    request(port, "POST", "/pub", b"")
    lines = set(ACCESS_LINE.findall(nsqd.log()))
    assert ("200", "GET", "/info") in lines
    assert ("200", "GET", "/stats?format=json&topic=zz") in lines
    assert ("400", "POST", "/topic/create?topic=bad!") in lines
    assert not any("pub" in uri for _, _, uri in lines), "nsqd does not log /pub and /mpub"


def test_invalid_query_logs_an_error_before_the_access_line(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory()
    request(nsqd.http_port, "GET", "/stats?a=%zz")
    log = nsqd.log()
    error = log.index('ERROR: failed to parse request params - invalid URL escape "%zz"')
    assert error < log.index("INFO: 400 GET /stats?a=%zz")


# ---- connections and framing --------------------------------------------------------------------------------


def test_keep_alive_and_pipelining(shared_nsqd: NsqdProcess) -> None:
    data = (b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" * 3 + b"POST /pub?topic=pipe HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: 2\r\n\r\nhiGET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    replies = raw_exchange(shared_nsqd.http_port, data)
    assert replies.count(b"HTTP/1.1 200 OK\r\n") == 5
    assert replies.endswith(b"}")


def test_http_1_0(shared_nsqd: NsqdProcess) -> None:
    """As Go: the answer says HTTP/1.0, has no Connection header, and the server closes."""
    raw = raw_exchange(shared_nsqd.http_port, b"GET /ping HTTP/1.0\r\n\r\n")
    reply = parse_raw_reply(raw)
    assert raw.startswith(b"HTTP/1.0 200 OK\r\n")
    assert (reply.status, reply.body, reply.header("Connection")) == (200, b"OK", None)


def test_header_names_are_canonical(shared_nsqd: NsqdProcess) -> None:
    raw = raw_exchange(shared_nsqd.http_port, b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head = raw.split(b"\r\n\r\n")[0]
    assert b"\r\nX-Nsq-Content-Type: nsq; version=1.0\r\n" in head
    assert b"\r\nContent-Type: application/json; charset=utf-8\r\n" in head
    assert b"\r\nContent-Length: " in head and b"\r\nDate: " in head


def test_content_length_over_the_limit_is_refused_without_reading_the_body(small: NsqdProcess) -> None:
    """The client announces 5 MB and sends none of it: the 413 comes at once, and the connection closes."""
    with _conn(small.http_port) as sock:
        sock.sendall(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n")
        resp = _read_reply(sock)
        assert resp.status == 413 and resp.getheader("Connection") == "close"
        sock.settimeout(2)
        assert sock.recv(100) == b"", "nothing more is read from this connection"


def test_small_unread_rest_keeps_the_connection(small: NsqdProcess) -> None:
    """A 413 with under 256 KiB unread: like Go, the rest is read and dropped and the connection is reused."""
    conn = http.client.HTTPConnection("127.0.0.1", small.http_port, timeout=5)
    conn.request("POST", "/pub?topic=t", b"x" * 5000)
    resp = conn.getresponse()
    assert (resp.status, resp.read(), resp.getheader("Connection")) == (413, b'{"message":"MSG_TOO_BIG"}', None)
    conn.request("GET", "/ping")
    assert conn.getresponse().read() == b"OK"
    conn.close()


def test_big_unread_rest_closes_but_the_answer_arrives(small: NsqdProcess) -> None:
    """The client writes all 3 MB before reading, and still gets its 413 (no reset mid-upload)."""
    reply = request(small.http_port, "POST", "/pub?topic=t", b"y" * 3_000_000)
    assert (reply.status, reply.header("Connection")) == (413, "close")
    assert reply.json() == {"message": "MSG_TOO_BIG"}


def test_chunked_body_over_the_limit(small: NsqdProcess) -> None:
    data = (b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + (b"200\r\n" + b"z" * 512 + b"\r\n") * 10 + b"0\r\n\r\n"
            + b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    replies = raw_exchange(small.http_port, data)
    first, second = replies.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"413 ") and b"Connection: close" not in first
    assert second.startswith(b"200 OK\r\n"), "the small rest was drained, the connection lived on"


def test_endless_chunked_body_is_cut_off(small: NsqdProcess) -> None:
    with _conn(small.http_port) as sock:
        sock.sendall(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        stop = threading.Event()

        def flood() -> None:
            try:
                while not stop.is_set():
                    sock.sendall(b"1000\r\n" + b"z" * 4096 + b"\r\n")
            except OSError:
                pass

        writer = threading.Thread(target=flood)
        writer.start()
        try:
            resp = _read_reply(sock)
            assert (resp.status, resp.getheader("Connection")) == (413, "close")
        finally:
            stop.set()
            writer.join(10)


def test_body_shorter_than_announced(small: NsqdProcess) -> None:
    """The client promises 100 bytes, sends 10 and stops writing: nsqd's body read fails (500)."""
    with _conn(small.http_port) as sock:
        sock.sendall(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        reply = parse_raw_reply(data)
        assert (reply.status, reply.body) == (500, b'{"message":"INTERNAL_ERROR"}')


def test_expect_continue_over_the_limit_gets_no_continue(small: NsqdProcess) -> None:
    with _conn(small.http_port) as sock:
        sock.sendall(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\nExpect: 100-continue\r\n\r\n")
        head = sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 413 "), head


def test_expect_continue_within_the_limit(small: NsqdProcess) -> None:
    with _conn(small.http_port) as sock:
        sock.sendall(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"hello")
        assert _read_reply(sock).status == 200


# ---- hostile input ------------------------------------------------------------------------------------------


def test_huge_headers_get_431_and_the_server_carries_on(shared_nsqd: NsqdProcess) -> None:
    data = b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (2 << 20) + b"\r\n\r\n"
    reply = raw_exchange(shared_nsqd.http_port, data)
    assert reply.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert request(shared_nsqd.http_port, "GET", "/ping").status == 200


def test_many_headers_are_fine(shared_nsqd: NsqdProcess) -> None:
    """Go limits header bytes, not lines (Python's http.client would stop at 100)."""
    headers = [(f"X-H{i}", "v") for i in range(500)]
    assert request(shared_nsqd.http_port, "GET", "/ping", headers=headers).status == 200


def test_header_lines(shared_nsqd: NsqdProcess) -> None:
    port = shared_nsqd.http_port
    folded = b"POST /pub?topic=fold HTTP/1.1\r\nHost: x\r\nX-Long: a\r\n  b\r\nContent-Length: 2\r\n\r\nhi"
    replies = raw_exchange(port, folded + b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert replies.count(b"HTTP/1.1 200 OK\r\n") == 2
    assert raw_exchange(port, b"GET /ping HTTP/1.1\r\nno colon here\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    both = (b"POST /pub?topic=te HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
    assert parse_raw_reply(raw_exchange(port, both)).body == b"OK", "chunked wins over Content-Length"
    # Go joins a folded line to an empty value without the space: `Transfer-Encoding: chunked` (a 501 before)
    folded_chunked = (b"POST /pub?topic=te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n"
                      b"Connection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
    assert parse_raw_reply(raw_exchange(port, folded_chunked)).body == b"OK"


#: Go nsqd 1.3.0's answers (recorded 2026-12-01 from ../shared/reference-go, Date header left out)
GO_PLAIN_400 = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
                b"400 Bad Request")


@pytest.mark.parametrize("data", [b"GET /ping HTTP/1.1\r\nHost: x\r\n", b"GET /pi",
                                  b"GET /ping HTTP/1.1\r\nHost: x\r\n\r"])
def test_a_head_cut_off_by_the_end_gets_gos_400(shared_nsqd: NsqdProcess, data: bytes) -> None:
    """Go's reader takes the cut-off line as a whole one and then meets the end (io.ErrUnexpectedEOF): a plain 400
    that a half-closed client reads; nothing for a connection that ends before sending anything."""
    assert raw_exchange(shared_nsqd.http_port, data, 2.0, half_close=True) == GO_PLAIN_400
    assert raw_exchange(shared_nsqd.http_port, b"", 2.0, half_close=True) == b""


def test_expect_and_transfer_encoding_values_read_as_go_reads_them(shared_nsqd: NsqdProcess) -> None:
    port = shared_nsqd.http_port
    # Go's hasToken: 100-continue bounded by spaces or commas anywhere in the value (200, where a 417 was)
    odd_expect = b"GET /ping HTTP/1.1\r\nHost: x\r\nExpect: pect: 100-continue\r\nConnection: close\r\n\r\n"
    assert parse_raw_reply(raw_exchange(port, odd_expect)).status == 200
    # Go deletes Transfer-Encoding before it checks header values, and ignores it below HTTP/1.1: an HTTP/1.0 /pub
    # without a length has no body (MSG_EMPTY), where we answered "invalid header value"
    nul = b"POST /pub?topic=heads HTTP/1.0\r\nTransfer-Encoding:\x00chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"
    reply = parse_raw_reply(raw_exchange(port, nul, 2.0, half_close=True))
    assert (reply.status, reply.body) == (400, b'{"message":"MSG_EMPTY"}')


def test_garbage_request_line(shared_nsqd: NsqdProcess) -> None:
    assert raw_exchange(shared_nsqd.http_port, b"\x00\x01\x02 nonsense\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw_exchange(shared_nsqd.http_port, b"G\xc9T /ping HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert request(shared_nsqd.http_port, "GET", "/ping").status == 200


@pytest.mark.parametrize("length", [b"\xb2", b"-1", b"1 2"])
def test_content_length_that_is_not_a_decimal_number(shared_nsqd: NsqdProcess, length: bytes) -> None:
    """Latin-1 digits like `\xb2` (superscript two) are not digits to Go either: 400, and the server carries on."""
    raw = b"POST /pub?topic=cl HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n2"
    assert parse_raw_reply(raw_exchange(shared_nsqd.http_port, raw)).status == 400
    assert request(shared_nsqd.http_port, "GET", "/ping").status == 200


def test_empty_content_length_means_no_body(shared_nsqd: NsqdProcess) -> None:
    """Go drops an empty Content-Length header, so the request has no body."""
    raw = b"POST /pub?topic=cl HTTP/1.1\r\nHost: x\r\nContent-Length: \r\nConnection: close\r\n\r\n"
    reply = parse_raw_reply(raw_exchange(shared_nsqd.http_port, raw))
    assert (reply.status, reply.body) == (400, b'{"message":"MSG_EMPTY"}')


@pytest.mark.parametrize(("target", "status", "body"), [
    (b"/pub?topic=\xff\xfe", 400, b'{"message":"INVALID_TOPIC"}'),
    (b"/pub?topic=t_raw&\xff=\xfe", 200, b"OK"),
    (b"/pub?topic=caf\xc3\xa9", 400, b'{"message":"INVALID_TOPIC"}'),
])
def test_non_utf8_query_bytes(shared_nsqd: NsqdProcess, target: bytes, status: int, body: bytes) -> None:
    raw = raw_exchange(shared_nsqd.http_port, b"POST " + target + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                                              b"Connection: close\r\n\r\nx")
    reply = parse_raw_reply(raw)
    assert (reply.status, reply.body) == (status, body)


def test_slowloris_does_not_hold_up_anyone(shared_nsqd: NsqdProcess) -> None:
    """A client trickling its request byte by byte for ~2 s while others are answered at normal speed."""
    request_bytes = b"POST /pub?topic=slow HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nslow"
    result: dict[str, bytes] = {}

    def trickle() -> None:
        with _conn(shared_nsqd.http_port, timeout=30) as sock:
            for i in range(len(request_bytes)):
                sock.sendall(request_bytes[i:i + 1])
                time.sleep(2 / len(request_bytes))
            result["reply"] = sock.recv(65536)

    slow = threading.Thread(target=trickle)
    slow.start()
    latencies = []
    while slow.is_alive():
        start = time.perf_counter()
        assert request(shared_nsqd.http_port, "GET", "/ping").status == 200
        latencies.append(time.perf_counter() - start)
        time.sleep(0.05)
    slow.join()
    assert result["reply"].startswith(b"HTTP/1.1 200 OK\r\n")
    assert len(latencies) > 10 and max(latencies) < 1.5  # starvation would be the whole 2 s trickle


def test_many_idle_connections_and_concurrent_clients(shared_nsqd: NsqdProcess) -> None:
    idle = [_conn(shared_nsqd.http_port) for _ in range(200)]
    try:
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda i: request(shared_nsqd.http_port, "POST", "/pub?topic=conc",
                                                       b"%d" % i).status, range(300)))
        assert statuses == [200] * 300
        wait_until(lambda: shared_nsqd.stats(topic="conc")["topics"][0]["message_count"] == 300)
    finally:
        for sock in idle:
            sock.close()


# ---- curl ---------------------------------------------------------------------------------------------------

needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")


def _curl(*args: str) -> str:
    return subprocess.run(["curl", "-s", *args], capture_output=True, timeout=30, check=True).stdout.decode()


@needs_curl
def test_curl_publish_and_read_back(shared_nsqd: NsqdProcess) -> None:
    url = shared_nsqd.http_url
    assert _curl("-d", "hello", f"{url}/pub?topic=curl") == "OK"
    assert _curl("--data-binary", "a\nb\n", f"{url}/mpub?topic=curl") == "OK"
    assert '"topic_name":"curl"' in _curl(f"{url}/stats?format=json&topic=curl")
    assert _curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/nope") == "404"


@needs_curl
def test_curl_headers(shared_nsqd: NsqdProcess) -> None:
    head = _curl("-i", "-X", "POST", f"{shared_nsqd.http_url}/topic/create?topic=curl2")
    assert head.startswith("HTTP/1.1 200 OK\r\n")
    assert "X-Nsq-Content-Type: nsq; version=1.0\r\n" in head and "Content-Length: 0\r\n" in head
    assert "\nContent-Type" not in head
    head = _curl("-sI", f"{shared_nsqd.http_url}/ping")
    assert head.startswith("HTTP/1.1 405 ") and "Allow: GET, OPTIONS\r\n" in head


@needs_curl
def test_curl_follows_redirects(shared_nsqd: NsqdProcess) -> None:
    assert _curl("-L", f"{shared_nsqd.http_url}/PING/") == "OK"


# ---- --tls-required -----------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_tls_required_turns_plain_http_away(nsqd_factory: NsqdFactory, tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost"], check=True, capture_output=True)
    nsqd = nsqd_factory("--tls-required=true", f"--tls-cert={cert}", f"--tls-key={key}", "--https-address=127.0.0.1:0")
    # NsqdProcess.start() polls /ping, which already answered 403; any answer counts as up
    reply = request(nsqd.http_port, "GET", "/info")
    assert reply.status == 403
    assert reply.header("X-Nsq-Content-Type") == "nsq; version=1.0"
    assert re.fullmatch(rb'\{"message": "TLS_REQUIRED", "https_port": -?\d+\}', reply.body)


def test_pipelined_flood_does_not_starve_other_clients(shared_nsqd: NsqdProcess) -> None:
    """One connection pipelining requests without pause must not keep the event loop to itself."""
    stop = threading.Event()
    flooder = _conn(shared_nsqd.http_port, timeout=30)
    batch = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" * 2000

    def drain() -> None:
        try:
            while flooder.recv(1 << 20):
                pass
        except OSError:
            pass

    def flood() -> None:
        try:
            while not stop.is_set():
                flooder.sendall(batch)
        except OSError:
            pass

    threads = [threading.Thread(target=drain, daemon=True), threading.Thread(target=flood, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        latencies = []
        for _ in range(5):
            start = time.perf_counter()
            assert request(shared_nsqd.http_port, "GET", "/ping", timeout=10).status == 200
            latencies.append(time.perf_counter() - start)
        assert max(latencies) < 2.0, latencies
    finally:
        stop.set()
        flooder.close()


def test_an_answer_bigger_than_the_socket_buffers_reaches_a_slow_reader(nsqd_factory: NsqdFactory) -> None:
    """/stats as text for 1500 topics (~170 KB) to a client that reads nothing at first: the server sends what
    the socket takes and finishes the rest when the client reads (http_server/connection.py), while serving others;
    the pipelined request behind it is answered after it, in order."""
    nsqd = nsqd_factory()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: request(nsqd.http_port, "POST", f"/topic/create?topic=big_{i:04d}_{'x' * 50}"),
                      range(1500)))
    with socket.create_connection(("127.0.0.1", nsqd.http_port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /stats?format=text HTTP/1.1\r\nHost: x\r\n\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.5)  # the answer fills both buffers; the server holds the rest
        assert request(nsqd.http_port, "GET", "/ping", timeout=2).body == b"OK"  # others are served meanwhile
        data = b""
        while not data.endswith(b"\r\n\r\nOK"):
            chunk = sock.recv(65536)
            assert chunk, "the server closed before both answers arrived"
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    assert length > 150_000  # far more than a 4 KiB receive buffer and the send buffer take at once
    body, second = rest[:length], rest[length:]
    assert body.count(b"big_") == 1500
    assert second.startswith(b"HTTP/1.1 200 OK\r\n") and second.endswith(b"\r\n\r\nOK")
