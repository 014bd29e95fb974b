"""nsqadmin's pages in a real headless Chromium, against real nsqd and nsqlookupd: what each page shows, every
action button (through its confirm() and the JSON API, so notifications follow), a node that does not answer,
graphite charts, and no error in the browser console. One browser and one cluster for the module.

The cluster (tests/admin/scenario.py): lookupd, nsqd A and B; t1 on both (A: c1 with a consumer that finished
2, c2 paused here; B: c1 with a consumer holding a message in flight), t2 paused on B and tombstoned there, and
1,000 more messages on A so that numbers need their thousands separators.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from selenium.webdriver.remote.webelement import WebElement

from tests.admin.browser import Browser, missing
from tests.admin.conftest import LOOKUPD, NSQADMIN, NSQD
from tests.admin.scenario import Cluster, Proc, admin, cluster, hold, request

pytestmark = pytest.mark.process


@dataclass
class Env:
    cl: Cluster
    admin: Proc
    browser: Browser
    workdir: Path

    def open(self, path: str, proc: Proc | None = None) -> Browser:
        return self.browser.open(f"http://{(proc or self.admin).http}{path}")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    assert not missing(), missing()
    tmp = tmp_path_factory.mktemp("pages")
    with cluster(NSQD, LOOKUPD, tmp) as cl:
        assert request(cl.a.http, "POST", "/mpub?topic=t1", b"\n".join([b"x" * 20] * 1000))[0] == 200
        assert request(cl.a.http, "POST", "/channel/pause?topic=t1&channel=c2")[0] == 200
        assert request(cl.lookupd.http, "POST", f"/topic/tombstone?topic=t2&node={cl.b.http}")[0] == 200
        holder = hold(cl.b.tcp_port, "t1", "c1")
        nsqadmin = admin(NSQADMIN, tmp, f"--lookupd-http-address={cl.lookupd.http}",
                         f"--notification-http-endpoint={cl.notifications.url}")
        browser = Browser(tmp / "profile")
        try:
            yield Env(cl, nsqadmin, browser, tmp)
        finally:
            browser.quit()
            nsqadmin.stop()
            holder.close()


@pytest.fixture(autouse=True)
def no_console_errors(env: Env) -> Iterator[None]:
    env.browser.console_errors()
    yield
    assert env.browser.console_errors() == []


def test_refresh_bar_shows_the_time_and_remembers_the_toggle(env: Env) -> None:
    b = env.open("/")
    toggle = b.find("#auto-refresh")
    assert toggle.is_selected()  # on by default: every 10 s
    toggle.click()  # off for the rest of the module, so no reload lands in the middle of a test
    assert b.text("#updated") and "auto-refresh every 10s" in b.text("header")
    b.next_page(b.find("#refresh-now").click)
    assert not b.find("#auto-refresh").is_selected()


def test_streams_page_lists_the_topics(env: Env) -> None:
    b = env.open("/")
    assert b.rows("topics") == [["t1"], ["t2"]]
    assert [a.text for a in b.all("nav a")] == ["Streams", "Nodes", "Counter", "Lookup"]
    b.screenshot("topics")
    b.next_page(b.all("#topics a")[0].click)
    assert b.text("h1") == "t1"


def test_topic_page_sums_nodes_and_rates_between_refreshes(env: Env) -> None:
    b = env.open("/topics/t1")
    nodes = {row[0]: row for row in b.rows("topic-nodes")}
    assert set(nodes) == {env.cl.a.http, env.cl.b.http}
    assert nodes[env.cl.a.http][4] == "1,005" and nodes[env.cl.b.http][4] == "3"
    assert b.text("#topic-nodes tfoot").split()[1:5] == ["0", "0", "0", "1,008"]
    channels = {row[0].split()[0]: row for row in b.rows("channels")}
    assert set(channels) == {"c1", "c2"} and "paused" in channels["c2"][0] and "paused" not in channels["c1"][0]
    assert channels["c1"][1] == "1,005"  # depth: A 1,002 (2 of the first 5 finished, 1 in flight on B), B 3 - 1
    assert "computed in this browser" in b.text("#rate-note")
    assert request(env.cl.a.http, "POST", "/mpub?topic=t1", b"\n".join([b"y"] * 500))[0] == 200
    time.sleep(0.5)
    b.open(f"http://{env.admin.http}/topics/t1")
    cell = b.find("#topic-nodes tfoot td.rate")
    assert 0 < float(cell.text.replace(",", "")) < 500 / 0.5 and (cell.get_attribute("title") or "").startswith("since")
    assert "End-to-end latency" in b.text()
    b.screenshot("topic")


def test_channel_page_shows_clients_and_in_flight(env: Env) -> None:
    b = env.open("/topics/t1/c1")
    assert b.text("h1") == "c1"
    assert b.text("#channel-nodes tfoot").split()[4] == "1"  # in flight
    clients = {row[3]: row for row in b.rows("clients")}
    assert set(clients) == {env.cl.a.http, env.cl.b.http}
    mine = clients[env.cl.a.http]
    assert mine[0] == "admin-test" and mine[2] == "admin-test/1.0 V2" and mine[7] == "2"  # finished
    assert clients[env.cl.b.http][6] == "1" and clients[env.cl.b.http][10].endswith("s")
    b.screenshot("channel")
    b.open(f"http://{env.admin.http}/topics/t1/nothing")
    assert "has channel nothing" in b.text("#not-found")


def test_nodes_and_node_pages(env: Env) -> None:
    b = env.open("/nodes")
    rows = {row[0]: row for row in b.rows("nodes")}
    assert set(rows) == {env.cl.a.http, env.cl.b.http}
    assert rows[env.cl.a.http][5] == "1.3.0" and rows[env.cl.a.http][6].startswith(env.cl.lookupd.http)
    [tombstoned] = b.all("#nodes a.badge.tombstoned")
    assert tombstoned.text == "t2" and "tombstoned" in (tombstoned.get_attribute("title") or "")
    b.screenshot("nodes")
    b.next_page(b.find(f'#nodes a[href="/nodes/{env.cl.a.http}"]').click)
    assert b.text("h1") == env.cl.a.http
    assert b.text(".totals").split("\n") == ["Topics", "1", "Messages", "1,505", "Clients", "1"]
    assert [row[0] for row in b.rows("node-topics")] == ["t1", "↳ c1", "↳ c2 paused"]
    b.screenshot("node")


def test_counter_page_totals_and_sorts(env: Env) -> None:
    _, counter = request(env.admin.http, "GET", "/api/counter")
    counts = sorted(s["message_count"] for s in counter["stats"].values())
    b = env.open("/counter")
    assert b.text("#total-messages") == f"{sum(counts):,}"
    header = b.all("#counter thead th")[3]
    header.click()
    header.click()
    assert [row[3] for row in b.rows("counter")] == [f"{c:,}" for c in reversed(counts)]
    assert header.get_attribute("aria-sort") == "descending"
    b.screenshot("counter")


def test_lookup_page_lists_inactive_topics(env: Env) -> None:
    b = env.open("/lookup")
    assert env.cl.lookupd.http in b.text()
    assert b.rows("inactive") == [["t2", "c9 delete", "Delete topic"]]  # tombstoned on its only node
    b.screenshot("lookup")


def test_a_node_that_does_not_answer(env: Env) -> None:
    """A listener that accepts and never answers: the page comes after the request timeout, with what the other
    node said and the warning naming the silent one."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    partial = admin(NSQADMIN, env.workdir, f"--nsqd-http-address={env.cl.a.http}", f"--nsqd-http-address={address}",
                    "--http-client-request-timeout=1s", name="admin-silent")
    try:
        start = time.monotonic()
        b = env.open("/topics/t1", partial)
        assert time.monotonic() - start < 3
        assert b.text("#warning").startswith(f'Partial result. WARNING: Get "http://{address}/')
        assert [row[0] for row in b.rows("topic-nodes")] == [env.cl.a.http]
        assert not b.all("#topic-nodes button")  # tombstoning needs nsqlookupd
        b.screenshot("partial")
    finally:
        partial.stop()
        silent.close()


def test_no_node_answering_is_an_error_page(env: Env) -> None:
    dead = admin(NSQADMIN, env.workdir, f"--lookupd-http-address={env.cl.dead}", name="admin-dead")
    try:
        b = env.open("/nodes", dead)
        assert b.text("#error").startswith("502 UPSTREAM_ERROR: failed to query any nsqlookupd")
    finally:
        dead.stop()
    b.console_errors()  # the 502 of the page itself is the expected console line


def test_graphite_charts_and_rate(env: Env) -> None:
    graphite = _FakeGraphite()
    charted = admin(NSQADMIN, env.workdir, f"--lookupd-http-address={env.cl.lookupd.http}",
                    f"--graphite-url={graphite.url}", name="admin-graphite")
    try:
        b = env.open("/topics/t1", charted)
        b.wait(lambda: b.text(".graphite-rate") == "2.00")  # 120 per 60 s statsd interval
        images = b.all("img.graph")
        assert len(images) == 2 and all(b.driver.execute_script("return arguments[0].naturalWidth", i) == 1
                                        for i in images)
        targets = {t for query in graphite.queries for t in query.get("target", [])}
        assert "sumSeries(stats.gauges.nsq.*.topic.t1.depth)" in targets
        assert "scale(sumSeries(stats.counters.nsq.*.topic.t1.message_count.count),0.01667)" in targets
        assert len(b.all("#channels img.spark")) == 2 and "graphite" in b.text(".note")
        # a node's page: Go's four charts of the nsqd process, and its topics' and channels' sparklines on that node
        node = env.cl.a.http
        host = node.replace(".", "_").replace(":", "_")
        b.open(f"http://{charted.http}/nodes/{node}")
        assert len(b.all("#node-graphs img.graph")) == 4
        b.wait(lambda: len(b.all("#node-topics img.spark")) >= 4)
        targets = {t for query in graphite.queries for t in query.get("target", [])}
        assert f"stats.gauges.nsq.{host}.mem.heap_objects" in targets
        assert f"scale(movingAverage(stats.counters.nsq.{host}.mem.gc_runs.count,45),0.01667)" in targets
        assert f"sumSeries(stats.gauges.nsq.{host}.topic.t1.depth)" in targets
        assert f"sumSeries(stats.gauges.nsq.{host}.topic.t1.channel.c1.clients)" in targets
    finally:
        charted.stop()
        graphite.close()


def test_every_action_button(env: Env) -> None:
    """Runs last: it changes the cluster. Each button asks first, calls the API, and the page shows the result."""
    cl, b = env.cl, env.browser
    sent = len(cl.notifications.bodies)
    b = env.open("/lookup")
    b.find("#create input[name=topic]").send_keys("made")
    b.find("#create input[name=channel]").send_keys("here")
    b.next_page(b.find("#create button").click)
    b.wait(lambda: ["made", "here delete", "Delete topic"] in b.rows("inactive"))
    b.click_and_confirm(b.find("#inactive button[data-url$='/made/here']"), "Delete channel here of topic made?")
    assert ["made", "", "Delete topic"] in b.rows("inactive")
    b.click_and_confirm(b.find("#inactive button[data-url$='/made']"), "Delete topic made?")
    assert all(row[0] != "made" for row in b.rows("inactive"))

    b = env.open("/topics/t1/c2")
    b.click_and_confirm(_button(b, "Unpause channel"), "Unpause channel c2?")
    assert b.text("h1") == "c2" and not _channel(cl.a, "c2")["paused"]
    b.click_and_confirm(_button(b, "Pause channel"), "Pause channel c2?")
    assert b.text("h1") == "c2 paused" and _channel(cl.a, "c2")["paused"]
    b.click_and_confirm(_button(b, "Empty queue"), "Empty channel c2?")
    assert b.text("#channel-nodes tfoot").split()[1] == "0" and _channel(cl.a, "c2")["depth"] == 0
    b.click_and_confirm(_button(b, "Delete channel"), "Delete channel c2 of topic t1?")
    assert b.driver.current_url.endswith("/topics/t1") and [r[0].split()[0] for r in b.rows("channels")] == ["c1"]

    b.click_and_confirm(_button(b, "Pause topic"), "Pause topic t1?")
    assert b.text("h1") == "t1 paused"
    b.click_and_confirm(_button(b, "Unpause topic"), "Unpause topic t1?")
    assert b.text("h1") == "t1"
    b.click_and_confirm(_button(b, "Empty queue"), "Empty the queue of topic t1?")
    tombstone = b.find(f"#topic-nodes button[data-url$='/api/nodes/{cl.b.http}']")
    b.click_and_confirm(tombstone, f"Tombstone {cl.b.http} for topic t1?")
    assert [row[0] for row in b.rows("topic-nodes")] == [cl.a.http]

    assert request(cl.a.http, "POST", "/topic/create?topic=doomed")[0] == 200
    b.wait(lambda: "doomed" in request(cl.lookupd.http, "GET", "/topics")[1]["topics"])
    b = env.open("/topics/doomed")
    b.click_and_confirm(_button(b, "Delete topic"), "Delete topic doomed and all its channels?")
    assert b.driver.current_url == f"http://{env.admin.http}/" and ["doomed"] not in b.rows("topics")

    actions = ["create_topic", "create_channel", "delete_channel", "delete_topic", "unpause_channel",
               "pause_channel", "empty_channel", "delete_channel", "pause_topic", "unpause_topic", "empty_topic",
               "tombstone_topic_producer", "delete_topic"]
    notes = cl.notifications.wait(sent + len(actions))[sent:]
    assert [n["action"] for n in notes] == actions
    assert notes[-2]["node"] == cl.b.http and notes[0]["url"] == f"http://{env.admin.http}/api/topics"


def _button(b: Browser, label: str) -> WebElement:
    [button] = [x for x in b.all("button.action") if x.text == label]
    return button


def _channel(node: Proc, channel: str) -> dict[str, object]:
    _, stats = request(node.http, "GET", f"/stats?format=json&topic=t1&channel={channel}")
    return stats["topics"][0]["channels"][0]


def _png() -> bytes:
    """A 1x1 transparent PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0\0\0\0\0")) + chunk(b"IEND", b""))


class _FakeGraphite:
    """graphite's /render: a PNG, or with format=json one datapoint of 120 (two per second over 60 s)."""

    def __init__(self) -> None:
        self.queries: list[dict[str, list[str]]] = []
        queries, png = self.queries, _png()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                queries.append(query)
                json = query.get("format") == ["json"]
                body = b'[{"target":"x","datapoints":[[120.0,1]]}]' if json else png
                self.send_response(200)
                self.send_header("Content-Type", "application/json" if json else "image/png")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
