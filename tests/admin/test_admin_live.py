"""nsqadmin against real nsqd and nsqlookupd: the actions take effect, a dead node costs at most the client
timeout and gives a warning, the ACL, notifications with the user, `/config` changes."""

from __future__ import annotations

import base64
import http.server
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from tests.admin.conftest import LOOKUPD, NSQADMIN, NSQD
from tests.admin.scenario import Cluster, Notifications, admin, cluster, request

pytestmark = pytest.mark.process


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Cluster]:
    with cluster(NSQD, LOOKUPD, tmp_path) as cl:
        yield cl


def test_actions_change_the_cluster(live: Cluster, tmp_path: Path) -> None:
    nsqadmin = admin(NSQADMIN, tmp_path, f"--lookupd-http-address={live.lookupd.http}")
    try:
        post = json.dumps({"action": "pause"}).encode()
        assert request(nsqadmin.http, "POST", "/api/topics/t1/c2", post)[0] == 200
        for node in (live.a, live.b):
            _, stats = request(node.http, "GET", "/stats?format=json&topic=t1")
            paused = {c["channel_name"]: c["paused"] for c in stats["topics"][0]["channels"]}
            assert paused.get("c2", True) is True and paused["c1"] is False
        assert request(nsqadmin.http, "POST", "/api/topics/t1/c2", b'{"action":"empty"}')[0] == 200
        _, stats = request(live.a.http, "GET", "/stats?format=json&topic=t1&channel=c2")
        assert stats["topics"][0]["channels"][0]["depth"] == 0
        assert request(nsqadmin.http, "POST", "/api/topics", b'{"topic":"new","channel":"ch"}')[0] == 200
        assert request(live.lookupd.http, "GET", "/channels?topic=new")[1]["channels"] == ["ch"]
        assert request(nsqadmin.http, "DELETE", "/api/topics/t2")[0] == 200
        assert not request(live.b.http, "GET", "/stats?format=json&topic=t2")[1]["topics"]
        assert request(nsqadmin.http, "GET", "/api/topics")[1] == {"topics": ["new", "t1"], "message": ""}
    finally:
        nsqadmin.stop()


def test_tombstone_hides_the_node_from_lookup(live: Cluster, tmp_path: Path) -> None:
    nsqadmin = admin(NSQADMIN, tmp_path, f"--lookupd-http-address={live.lookupd.http}")
    try:
        status, body = request(nsqadmin.http, "DELETE", f"/api/nodes/{live.a.http}", b'{"topic":"t1"}')
        assert (status, body) == (200, {"message": ""})
        producers = request(live.lookupd.http, "GET", "/lookup?topic=t1")[1]["producers"]
        assert [p["http_port"] for p in producers] == [live.b.http_port]
        assert not request(live.a.http, "GET", "/stats?format=json&topic=t1")[1]["topics"]
    finally:
        nsqadmin.stop()


def test_a_stalled_node_costs_one_timeout_and_a_warning(live: Cluster, tmp_path: Path) -> None:
    """B stopped (SIGSTOP: it accepts, never answers): the answer comes after about the request timeout, with
    A's data and a warning naming B."""
    nsqadmin = admin(NSQADMIN, tmp_path, f"--nsqd-http-address={live.a.http}", f"--nsqd-http-address={live.b.http}",
                     "--http-client-request-timeout=1s")
    assert live.b.process is not None
    live.b.process.send_signal(signal.SIGSTOP)
    try:
        for path in ("/api/topics", "/api/nodes"):
            start = time.monotonic()
            status, body = request(nsqadmin.http, "GET", path)
            elapsed = time.monotonic() - start
            assert status == 200 and 0.9 < elapsed < 2.5, (path, elapsed)
            assert body["message"].startswith("WARNING: Get \"http://" + live.b.http)
            assert "Client.Timeout exceeded" in body["message"]
        assert body["nodes"][0]["http_port"] == live.a.http_port and len(body["nodes"]) == 1
        status, body = request(nsqadmin.http, "GET", "/api/topics/t1")
        assert status == 200 and [n["node"] for n in body["nodes"]] == [live.a.http]
        assert "WARNING" in body["message"]
    finally:
        live.b.process.send_signal(signal.SIGCONT)
        nsqadmin.stop()


def test_no_node_answering_is_a_502(live: Cluster, tmp_path: Path) -> None:
    nsqadmin = admin(NSQADMIN, tmp_path, f"--lookupd-http-address={live.dead}")
    try:
        status, body = request(nsqadmin.http, "GET", "/api/nodes")
        assert status == 502
        assert body["message"] == (f'UPSTREAM_ERROR: failed to query any nsqlookupd: Get "http://{live.dead}/nodes":'
                                   f" dial tcp {live.dead}: connect: connection refused")
    finally:
        nsqadmin.stop()


def test_admin_users_need_the_acl_header(live: Cluster, tmp_path: Path) -> None:
    sink = Notifications()
    nsqadmin = admin(NSQADMIN, tmp_path, f"--lookupd-http-address={live.lookupd.http}", "--admin-user=alice",
                     "--acl-http-header=X-User", f"--notification-http-endpoint={sink.url}")
    try:
        action = b'{"action":"pause"}'
        assert request(nsqadmin.http, "POST", "/api/topics/t1", action) == (403, {"message": "FORBIDDEN"})
        assert request(nsqadmin.http, "POST", "/api/topics/t1", action, {"X-User": "bob"})[0] == 403
        assert request(nsqadmin.http, "DELETE", "/api/topics/t1", None, {"X-User": "bob"})[0] == 403
        basic = "Basic " + base64.b64encode(b"carol:secret").decode()
        ok = request(nsqadmin.http, "POST", "/api/topics/t1", action, {"X-User": "alice", "Authorization": basic})
        assert ok == (200, {"message": ""})
        assert request(nsqadmin.http, "GET", "/api/topics")[0] == 200  # reading needs no ACL
        [note] = sink.wait(1)
        assert (note["action"], note["topic"], note["user"]) == ("pause_topic", "t1", "carol")
        assert note["url"] == f"http://{nsqadmin.http}/api/topics/t1" and "channel" not in note
    finally:
        nsqadmin.stop()
        sink.close()


def test_config_changes_live(live: Cluster, tmp_path: Path) -> None:
    nsqadmin = admin(NSQADMIN, tmp_path, f"--lookupd-http-address={live.dead}")
    try:
        assert request(nsqadmin.http, "GET", "/api/topics")[0] == 502
        body = json.dumps([live.lookupd.http]).encode()
        assert request(nsqadmin.http, "PUT", "/config/nsqlookupd_http_addresses", body) == (200, [live.lookupd.http])
        assert request(nsqadmin.http, "GET", "/api/topics")[1] == {"topics": ["t1", "t2"], "message": ""}
        assert request(nsqadmin.http, "PUT", "/config/log_level", b"warn") == (200, 3)
        assert request(nsqadmin.http, "PUT", "/config/base_path", b"/x") == (400, {"message": "INVALID_OPTION"})
    finally:
        nsqadmin.stop()


class _Graphite(http.server.BaseHTTPRequestHandler):
    """Graphite's render endpoint: answers a PNG-typed body and keeps what it was asked."""

    asked: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.asked.append((self.path, self.headers.get("Authorization")))
        body = b"not really a png"
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_proxy_graphite_passes_render_through_with_the_urls_credentials(live: Cluster, tmp_path: Path) -> None:
    graphite = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Graphite)
    threading.Thread(target=graphite.serve_forever, daemon=True).start()
    origin = f"127.0.0.1:{graphite.server_address[1]}"
    nsqadmin = admin(NSQADMIN, tmp_path, f"--lookupd-http-address={live.lookupd.http}", "--proxy-graphite",
                     f"--graphite-url=http://ops:pw@{origin}")
    try:
        with urllib.request.urlopen(f"http://{nsqadmin.http}/render?target=a.b&from=-1h", timeout=10) as reply:
            assert (reply.status, reply.headers["Content-Type"], reply.read()) == (200, "image/png",
                                                                                    b"not really a png")
        assert _Graphite.asked == [("/render?target=a.b&from=-1h", "Basic " + base64.b64encode(b"ops:pw").decode())]
        graphite.shutdown()
        graphite.server_close()
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(f"http://{nsqadmin.http}/render?target=a.b", timeout=10)
        assert gone.value.code == 502
        assert request(nsqadmin.http, "GET", "/api/topics")[0] == 200  # the API is not proxied
    finally:
        nsqadmin.stop()
        graphite.server_close()


def test_dev_static_dir_serves_the_assets_from_there(live: Cluster, tmp_path: Path) -> None:
    """--dev-static-dir (Go's "development use only"): /static/<asset> is read from that directory, each time."""
    static = tmp_path / "static"
    static.mkdir()
    (static / "admin.js").write_text("// edited\n")
    nsqadmin = admin(NSQADMIN, tmp_path, f"--lookupd-http-address={live.lookupd.http}", f"--dev-static-dir={static}")
    try:
        with urllib.request.urlopen(f"http://{nsqadmin.http}/static/admin.js", timeout=10) as reply:
            assert reply.read() == b"// edited\n"
        (static / "admin.js").write_text("// edited again\n")
        with urllib.request.urlopen(f"http://{nsqadmin.http}/static/admin.js", timeout=10) as reply:
            assert reply.read() == b"// edited again\n"
        with pytest.raises(urllib.error.HTTPError) as missing:  # only that directory: no fallback to the packaged ones
            urllib.request.urlopen(f"http://{nsqadmin.http}/static/admin.css", timeout=10)
        assert missing.value.code == 404
    finally:
        nsqadmin.stop()
