"""nsq_to_http and nsq_to_nsq as real processes between real nsqd (and nsqlookupd) and a local HTTP sink."""

from __future__ import annotations

import json
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nsqd_py.testing import LookupdServer, NsqdServer, free_port
from tests.support import NsqdProcess, channel_stats, drain, finished_everything, unique, wait_until
from tests.tools.support import Tool, curl_pub, run_tool

pytestmark = pytest.mark.process  # starts real processes: left out of `make check`

FAST_RETRY = "--consumer-opt=default_requeue_delay,50ms"


class Sink:
    """An HTTP endpoint that records what it accepted and answers 500 to every ``fail_every``-th request."""

    def __init__(self, fail_every: int = 0) -> None:
        self.fail_every = fail_every
        self.requests = 0
        self.accepted: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, body: bytes) -> None:
                with sink.lock:
                    sink.requests += 1
                    fail = sink.fail_every and sink.requests % sink.fail_every == 0
                    if not fail:
                        sink.accepted.append(body)
                        sink.headers.append(dict(self.headers))
                self.send_response(500 if fail else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                self._answer(self.rfile.read(int(self.headers["Content-Length"])))

            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                self._answer(query["data"][0].encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sink() -> Iterator[Sink]:
    s = Sink(fail_every=3)
    yield s
    s.close()


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[list[Tool]]:
    started: list[Tool] = []
    yield started
    for tool in started:
        tool.kill()


def test_nsq_to_http_post_delivers_every_message_through_failures(shared_nsqd: NsqdProcess, sink: Sink,
                                                                 tmp_path: Path, tools: list[Tool]) -> None:
    """Every third request fails: those messages are REQed and come back, so every body arrives (at least once)
    and the channel ends empty."""
    topic = unique("http")
    bodies = [f"event {i}" for i in range(60)]
    curl_pub(shared_nsqd, topic, bodies)
    tool = Tool(tmp_path, "nsq_to_http", f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}",
                f"--post=http://{sink.address}/hook", "--content-type=text/plain", "--header=X-Trace: abc",
                "-n=4", FAST_RETRY, "--status-every=20")
    tools.append(tool)
    wait_until(lambda: {b.decode() for b in sink.accepted} >= set(bodies), timeout=30)
    wait_until(lambda: finished_everything(shared_nsqd, topic, "nsq_to_http"), timeout=15)
    assert sink.requests > len(bodies), "some requests failed and were retried"
    assert channel_stats(shared_nsqd, topic, "nsq_to_http")["requeue_count"] > 0
    assert all(h["Content-Type"] == "text/plain" and h["X-Trace"] == "abc" for h in sink.headers)
    assert sink.headers[0]["User-Agent"].startswith("nsq_to_http/1.3.0")
    assert tool.stop() == 0
    assert "[aggregate]: finished 20 - 99th: " in tool.stderr()


def test_nsq_to_http_get_round_robin(shared_nsqd: NsqdProcess, tmp_path: Path, tools: list[Tool]) -> None:
    first, second = Sink(), Sink()
    try:
        topic = unique("get")
        curl_pub(shared_nsqd, topic, ["a b", "c&d", "e", "f"])
        tools.append(Tool(tmp_path, "nsq_to_http", f"--nsqd-tcp-address={shared_nsqd.tcp_address}",
                          f"--topic={topic}", "--mode=round-robin", "-n=1",
                          f"--get=http://{first.address}/?data=%s", f"--get=http://{second.address}/?data=%s"))
        wait_until(lambda: len(first.accepted) + len(second.accepted) == 4, timeout=20)
        assert sorted(first.accepted + second.accepted) == [b"a b", b"c&d", b"e", b"f"]
        assert len(first.accepted) == len(second.accepted) == 2
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(("args", "message"), [
    (["--topic=t"], "--nsqd-tcp-address or --lookupd-http-address required"),
    (["--topic=t", "--nsqd-tcp-address=a:1"], "--get or --post required"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--get=http://x/"], "invalid GET address - must be a printf string"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--get=http://x/%s", "--content-type=x"],
     "--content-type only used with --post"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--post=http://x/", "--sample=2"],
     "ERROR: --sample must be between 0.0 and 1.0"),
    ([], "--topic and --channel are required"),
])
def test_nsq_to_http_bad_options(args: list[str], message: str) -> None:
    out = run_tool("nsq_to_http", *args)
    assert out.returncode == 1 and message in out.stderr.decode(), out.stderr


def test_nsq_to_nsq_copies_between_two_nsqd(shared_nsqd: NsqdProcess, nsqd_factory, tmp_path: Path,
                                            tools: list[Tool]) -> None:
    destination = nsqd_factory()
    topic = unique("copy")
    bodies = [f"m{i}" for i in range(200)]
    curl_pub(shared_nsqd, topic, bodies)
    tools.append(Tool(tmp_path, "nsq_to_nsq", f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}",
                      f"--destination-nsqd-tcp-address={destination.tcp_address}", "--destination-topic=copied"))
    wait_until(lambda: finished_everything(shared_nsqd, topic, "nsq_to_nsq"), timeout=30)
    assert sorted(m.body.decode() for m in drain(destination.tcp_port, "copied", "check", idle=0.5)) == sorted(bodies)


def test_nsq_to_nsq_skips_a_dead_destination(shared_nsqd: NsqdProcess, nsqd_factory, tmp_path: Path,
                                            tools: list[Tool]) -> None:
    """hostpool: the destination that refuses connections fails, its messages are REQed and land on the live one."""
    live = nsqd_factory()
    topic = unique("pool")
    curl_pub(shared_nsqd, topic, [f"p{i}" for i in range(30)])
    tools.append(Tool(tmp_path, "nsq_to_nsq", f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}",
                      f"--destination-nsqd-tcp-address=127.0.0.1:{free_port()}",
                      f"--destination-nsqd-tcp-address={live.tcp_address}", FAST_RETRY))
    wait_until(lambda: finished_everything(shared_nsqd, topic, "nsq_to_nsq"), timeout=30)
    got = {m.body.decode() for m in drain(live.tcp_port, topic, "check", idle=0.5)}
    assert got == {f"p{i}" for i in range(30)}


def test_nsq_to_nsq_json_filters(shared_nsqd: NsqdProcess, nsqd_factory, tmp_path: Path, tools: list[Tool]) -> None:
    destination = nsqd_factory()
    topic = unique("json")
    events = [{"kind": "click", "user": {"id": 1, "name": "a"}, "noise": 1},
              {"kind": "view", "user": {"id": 2}},
              {"user": {"id": 3}},
              {"kind": "click", "user": {"id": 4}}]
    curl_pub(shared_nsqd, topic, [json.dumps(e) for e in events] + ["not json"])
    tools.append(Tool(tmp_path, "nsq_to_nsq", f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}",
                      f"--destination-nsqd-tcp-address={destination.tcp_address}", "--require-json-field=kind",
                      "--require-json-value=click", "--whitelist-json-field=kind",
                      "--whitelist-json-field=user.id"))
    wait_until(lambda: finished_everything(shared_nsqd, topic, "nsq_to_nsq"), timeout=30)
    copied = sorted((json.loads(m.body) for m in drain(destination.tcp_port, topic, "check", idle=0.5)),
                    key=lambda e: e["user"]["id"])
    assert copied == [{"kind": "click", "user": {"id": 1}}, {"kind": "click", "user": {"id": 4}}]


def test_nsq_to_nsq_through_lookupd(tmp_path: Path, tools: list[Tool]) -> None:
    with LookupdServer() as lookupd, NsqdServer(lookupd=lookupd) as source, NsqdServer() as destination:
        source.publish("found", b"one", b"two")
        wait_until(lambda: b"found" in _lookup(lookupd), timeout=10)
        tools.append(Tool(tmp_path, "nsq_to_nsq", f"--lookupd-http-address={lookupd.http_address}", "--topic=found",
                          f"--destination-nsqd-tcp-address={destination.tcp_address}"))
        assert sorted(destination.consume("found", "check", 2, timeout=30)) == [b"one", b"two"]


def _lookup(lookupd: LookupdServer) -> bytes:
    with urllib.request.urlopen(f"{lookupd.http_url}/topics", timeout=5) as reply:
        return reply.read()


@pytest.mark.parametrize(("args", "message"), [
    ([], "--topic is required"),
    (["--topic=t"], "--nsqd-tcp-address or --lookupd-http-address required"),
    (["--topic=t", "--nsqd-tcp-address=a:1"], "--destination-nsqd-tcp-address required"),
    (["--topic=t", "--nsqd-tcp-address=a:1", "--destination-nsqd-tcp-address=b:1", "--require-json-value=x"],
     "--require-json-value requires --require-json-field"),
])
def test_nsq_to_nsq_bad_options(args: list[str], message: str) -> None:
    out = run_tool("nsq_to_nsq", *args)
    assert out.returncode == 1 and message in out.stderr.decode(), out.stderr
