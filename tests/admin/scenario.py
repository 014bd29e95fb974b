"""One cluster and one list of nsqadmin requests, run against Go's binaries (to record, `record_go.py`) and
against ours (tests/admin/test_api_recorded.py), with the answers normalised so that the two compare key for key.

The cluster: a lookupd, two nsqd (`A`, `B`) registered with it. Topic `t1` on both (A: channels c1, c2 with 5
messages and a consumer that finished 2; B: c1 with 3 messages), `t2` paused on B only. `--mem-queue-size=2`
spills the rest to disk, so depth splits into memory and backend.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from nsqd_py.testing import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nsqadmin"


@dataclass
class Proc:
    """A daemon on free loopback ports, up once /ping answers."""

    argv: list[str]
    http_port: int
    tcp_port: int = 0
    log: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 20) -> Proc:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.argv} exited: {self.log.read_text() if self.log else ''}")
            try:
                with urllib.request.urlopen(f"http://{self.http}/ping", timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.argv} did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def request(address: str, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 30) -> tuple[int, Any]:
    """One HTTP request; the status and the decoded JSON answer (the text when it is not JSON)."""
    req = urllib.request.Request(f"http://{address}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            status, data = reply.status, reply.read()
    except urllib.error.HTTPError as err:
        status, data = err.code, err.read()
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data.decode()


class Notifications:
    """A tiny HTTP endpoint that keeps every JSON body POSTed to it."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, count: int, timeout: float = 10) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.bodies) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.bodies)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def consume(tcp_port: int, topic: str, channel: str, finish: int) -> socket.socket:
    """A consumer that identifies, subscribes, finishes ``finish`` messages and stays connected with RDY 0."""
    sock = socket.create_connection(("127.0.0.1", tcp_port), timeout=10)
    identify = json.dumps({"client_id": "admin-test", "hostname": "admin-test-host", "user_agent": "admin-test/1.0",
                           "feature_negotiation": False}).encode()
    sock.sendall(b"  V2" + b"IDENTIFY\n" + struct.pack(">I", len(identify)) + identify)
    _frame(sock)
    sock.sendall(f"SUB {topic} {channel}\n".encode())
    _frame(sock)
    sock.sendall(f"RDY {finish}\n".encode())
    ids = [_frame(sock)[10:26] for _ in range(finish)]
    sock.sendall(b"RDY 0\n" + b"".join(b"FIN " + msg_id + b"\n" for msg_id in ids))
    return sock


def hold(tcp_port: int, topic: str, channel: str) -> socket.socket:
    """A consumer with one message in flight: it takes a message and never finishes it."""
    sock = socket.create_connection(("127.0.0.1", tcp_port), timeout=10)
    sock.sendall(b"  V2" + f"SUB {topic} {channel}\nRDY 1\n".encode())
    _frame(sock)
    _frame(sock)
    return sock


def _frame(sock: socket.socket) -> bytes:
    size, frame_type = struct.unpack(">II", _read(sock, 8))
    data = _read(sock, size - 4)
    assert frame_type != 1, data
    return data


def _read(sock: socket.socket, size: int) -> bytes:
    buf = b""
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


@dataclass
class Cluster:
    lookupd: Proc
    a: Proc
    b: Proc
    dead: str
    notifications: Notifications
    consumer: socket.socket
    names: dict[str, str] = field(default_factory=dict)


@contextmanager
def cluster(nsqd: list[str], lookupd: list[str], workdir: Path) -> Iterator[Cluster]:
    """The scenario's cluster, from the ``nsqd`` and ``lookupd`` commands (Go's binaries or ours)."""
    with ExitStack() as stack:
        lk = Proc([*lookupd, f"--tcp-address=127.0.0.1:{(lt := free_port())}",
                   f"--http-address=127.0.0.1:{(lh := free_port())}", "--broadcast-address=127.0.0.1"],
                  lh, lt, workdir / "lookupd.log")
        stack.callback(lk.stop)
        lk.start()
        nodes = []
        for name in ("a", "b"):
            data = workdir / name
            data.mkdir()
            node = Proc([*nsqd, f"--data-path={data}", f"--tcp-address=127.0.0.1:{(t := free_port())}",
                         f"--http-address=127.0.0.1:{(h := free_port())}", "--broadcast-address=127.0.0.1",
                         f"--lookupd-tcp-address=127.0.0.1:{lk.tcp_port}",
                         "--mem-queue-size=2", "--e2e-processing-latency-percentile=0.99",
                         "--e2e-processing-latency-percentile=0.5"], h, t, workdir / f"{name}.log")
            stack.callback(node.stop)
            nodes.append(node.start())
        a, b = nodes
        for node, path in ((a, "/topic/create?topic=t1"), (a, "/channel/create?topic=t1&channel=c1"),
                           (a, "/channel/create?topic=t1&channel=c2"), (b, "/topic/create?topic=t1"),
                           (b, "/channel/create?topic=t1&channel=c1"), (b, "/topic/create?topic=t2"),
                           (b, "/channel/create?topic=t2&channel=c9")):
            assert request(node.http, "POST", path)[0] == 200, path
        request(a.http, "POST", "/mpub?topic=t1", b"\n".join(b"m%d" % i for i in range(5)))
        request(b.http, "POST", "/mpub?topic=t1", b"\n".join(b"m%d" % i for i in range(3)))
        request(b.http, "POST", "/pub?topic=t2", b"one")
        request(b.http, "POST", "/topic/pause?topic=t2")
        consumer = consume(a.tcp_port, "t1", "c1", 2)
        stack.callback(consumer.close)
        _wait_registered(lk.http)
        notifications = Notifications()
        stack.callback(notifications.close)
        dead = f"127.0.0.1:{free_port()}"
        names = {lk.http: "LOOKUPD_HTTP", f"127.0.0.1:{lk.tcp_port}": "LOOKUPD_TCP", a.http: "A_HTTP",
                 f"127.0.0.1:{a.tcp_port}": "A_TCP", b.http: "B_HTTP", f"127.0.0.1:{b.tcp_port}": "B_TCP",
                 dead: "DEAD", notifications.url: "NOTIFY_URL"}
        yield Cluster(lk, a, b, dead, notifications, consumer, names)


def _wait_registered(lookupd_http: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, nodes = request(lookupd_http, "GET", "/nodes")
        topics = sorted(t for p in nodes.get("producers", []) for t in p["topics"])
        _, channels = request(lookupd_http, "GET", "/channels?topic=t1")
        if topics == ["t1", "t1", "t2"] and sorted(channels.get("channels") or []) == ["c1", "c2"]:
            return
        time.sleep(0.1)
    raise RuntimeError("nsqd did not register with lookupd")


def admin(command: list[str], workdir: Path, *flags: str, name: str = "admin") -> Proc:
    port = free_port()
    return Proc([*command, f"--http-address=127.0.0.1:{port}", *flags], port, 0, workdir / f"{name}.log").start()


#: the read-only requests, by name: (admin, method, path) with admin "lookupd", "nsqd" or "partial"
READS: dict[str, tuple[str, str, str]] = {
    "topics": ("lookupd", "GET", "/api/topics"),
    "topics_inactive": ("lookupd", "GET", "/api/topics?inactive=true"),
    "topic_t1": ("lookupd", "GET", "/api/topics/t1"),
    "topic_t2": ("lookupd", "GET", "/api/topics/t2"),
    "topic_missing": ("lookupd", "GET", "/api/topics/missing"),
    "channel_t1_c1": ("lookupd", "GET", "/api/topics/t1/c1"),
    "channel_t1_c2": ("lookupd", "GET", "/api/topics/t1/c2"),
    "channel_t1_missing": ("lookupd", "GET", "/api/topics/t1/missing"),
    "nodes": ("lookupd", "GET", "/api/nodes"),
    "node_a": ("lookupd", "GET", "/api/nodes/{A_HTTP}"),
    "node_missing": ("lookupd", "GET", "/api/nodes/127.0.0.1:1"),
    "counter": ("lookupd", "GET", "/api/counter"),
    "graphite_no_metric": ("lookupd", "GET", "/api/graphite"),
    "graphite_no_target": ("lookupd", "GET", "/api/graphite?metric=rate"),
    "config_lookupds": ("lookupd", "GET", "/config/nsqlookupd_http_addresses"),
    "config_nsqds": ("lookupd", "GET", "/config/nsqd_http_addresses"),
    "config_log_level": ("lookupd", "GET", "/config/log_level"),
    "config_statsd_interval": ("lookupd", "GET", "/config/statsd_interval"),
    "config_admin_users": ("lookupd", "GET", "/config/admin_users"),
    "config_base_path": ("lookupd", "GET", "/config/base_path"),
    "config_bogus": ("lookupd", "GET", "/config/bogus"),
    "ping": ("lookupd", "GET", "/ping"),
    "not_found": ("lookupd", "GET", "/api/nothing"),
    "nsqd_topics": ("nsqd", "GET", "/api/topics"),
    "nsqd_nodes": ("nsqd", "GET", "/api/nodes"),
    "nsqd_topic_t1": ("nsqd", "GET", "/api/topics/t1"),
    "nsqd_topic_missing": ("nsqd", "GET", "/api/topics/missing"),
    "partial_topics": ("partial", "GET", "/api/topics"),
    "partial_nodes": ("partial", "GET", "/api/nodes"),
    "partial_topic_t1": ("partial", "GET", "/api/topics/t1"),
}

#: the actions, in order, on the lookupd admin: (name, method, path, JSON body); then the reads after them
ACTIONS: list[tuple[str, str, str, bytes]] = [
    ("create_topic_channel", "POST", "/api/topics", b'{"topic":"t3","channel":"c3"}'),
    ("create_invalid_topic", "POST", "/api/topics", b'{"topic":"bad topic"}'),
    ("create_empty_body", "POST", "/api/topics", b""),
    ("pause_topic", "POST", "/api/topics/t1", b'{"action":"pause"}'),
    ("pause_channel", "POST", "/api/topics/t1/c1", b'{"action":"pause"}'),
    ("empty_channel", "POST", "/api/topics/t1/c2", b'{"action":"empty"}'),
    ("unpause_topic", "POST", "/api/topics/t1", b'{"action":"unpause"}'),
    ("bad_action", "POST", "/api/topics/t1", b'{"action":"explode"}'),
    ("delete_channel", "DELETE", "/api/topics/t1/c2", b""),
    ("tombstone_bad_body", "DELETE", "/api/nodes/{B_HTTP}", b"junk"),
    ("tombstone", "DELETE", "/api/nodes/{B_HTTP}", b'{"topic":"t2"}'),
    ("delete_topic", "DELETE", "/api/topics/t2", b""),
    ("after_topic_t1", "GET", "/api/topics/t1", b""),
    ("after_channel_t1_c1", "GET", "/api/topics/t1/c1", b""),
    ("after_nodes", "GET", "/api/nodes", b""),
    ("after_topics", "GET", "/api/topics", b""),
]


def run(nsqd: list[str], lookupd: list[str], nsqadmin: list[str],
        first_node: Callable[[dict[str, Any], Cluster], bool] | None = None) -> dict[str, Any]:
    """The whole scenario: every answer (status, body) by name, and the notifications, normalised.
    ``first_node``: asked again until true for `topic_t1` (Go merges nodes in the order they answer)."""
    with tempfile.TemporaryDirectory() as tmp, cluster(nsqd, lookupd, Path(tmp)) as cl:
        workdir = Path(tmp)
        admins = {
            "lookupd": admin(nsqadmin, workdir, f"--lookupd-http-address={cl.lookupd.http}",
                             f"--notification-http-endpoint={cl.notifications.url}"),
            "nsqd": admin(nsqadmin, workdir, f"--nsqd-http-address={cl.a.http}", f"--nsqd-http-address={cl.b.http}",
                          name="admin-nsqd"),
            "partial": admin(nsqadmin, workdir, f"--lookupd-http-address={cl.lookupd.http}",
                             f"--lookupd-http-address={cl.dead}", name="admin-partial"),
        }
        try:
            answers: dict[str, Any] = {}
            for name, (which, method, path) in READS.items():
                for _ in range(40):
                    status, body = request(admins[which].http, method, path.format(**_by_name(cl)))
                    if first_node is None or not name.endswith("topic_t1") or first_node(body, cl):
                        break
                answers[name] = [status, body]
            for name, method, path, data in ACTIONS:
                headers = {"User-Agent": "admin-test/1.0", "Content-Type": "application/json"}
                status, body = request(admins["lookupd"].http, method, path.format(**_by_name(cl)), data or None,
                                       headers)
                answers[name] = [status, body]
            answers["notifications"] = cl.notifications.wait(9)
            return _sort_node_lists(normalise(answers, cl))
        finally:
            for proc in admins.values():
                proc.stop()


def _sort_node_lists(answers: dict[str, Any]) -> dict[str, Any]:
    """Go lists nodes in the order they answered (/api/nodes in nsqd mode, a channel's `nodes`): sorted here."""
    for name in ("nodes", "nsqd_nodes", "partial_nodes", "after_nodes"):
        body = answers[name][1]
        if isinstance(body, dict) and isinstance(body.get("nodes"), list):
            body["nodes"].sort(key=lambda node: str(node["http_port"]))
    for name in ("channel_t1_c1", "channel_t1_c2", "after_channel_t1_c1"):
        body = answers[name][1]
        if isinstance(body, dict) and isinstance(body.get("nodes"), list):
            body["nodes"].sort(key=lambda node: str(node["node"]))
    return answers


def _by_name(cl: Cluster) -> dict[str, str]:
    return {name: address for address, name in cl.names.items()}


def a_first(body: dict[str, Any], cl: Cluster) -> bool:
    """Node A merged first (it is A's channel dicts that become the aggregates)."""
    nodes = body.get("nodes") or []
    return bool(nodes) and nodes[0]["node"] == cl.a.http


_VOLATILE = {"connect_ts", "connected", "timestamp", "hostname", "via", "remote_ip", "remote_address"}
_E2E_VALUES = {"value", "min", "max", "average"}


def normalise(value: Any, cl: Cluster) -> Any:
    """Addresses and ports by role (A_HTTP ...), other loopback ports as PORT, and the values that differ from
    run to run (times, host names, latencies) as placeholders; keys and everything else stay."""
    ports = {int(address.rpartition(":")[2]): name for address, name in cl.names.items() if "/" not in address}
    text = json.dumps(value)
    for address, name in sorted(cl.names.items(), key=lambda item: -len(item[0])):
        text = text.replace(address, name)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    return _placeholders(json.loads(text), ports)


def _placeholders(value: Any, ports: dict[int, str], key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _placeholders(v, ports, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_placeholders(v, ports, key) for v in value]
    if key in _VOLATILE and value not in ("", None):
        return f"<{key}>"
    if key in _E2E_VALUES and isinstance(value, int | float):
        return "<latency>"
    if key in ("tcp_port", "http_port") and isinstance(value, int):
        return ports.get(value, "PORT")
    return value
