"""nsqadmin's channel page shows each node's first messages (nsqd-py's /channel/peek, beyond nsqd) and opens one: live
against the scenario's cluster of our nsqd, and rendered from data for what a Go node (no peek) leaves as it was."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from urllib.parse import quote

import pytest

from nsqd_py.admin.charts import Charts
from nsqd_py.admin.messages import body_text, shown
from nsqd_py.admin.options import AdminOptions
from nsqd_py.admin.pages import template_environment
from tests.admin.conftest import LOOKUPD, NSQADMIN, NSQD
from tests.admin.scenario import admin, cluster, request

_ROW = re.compile(r'<tr><td><a href="(/topics/t1/c2/message\?[^"]+)"><code>(\w+)</code></a></td>\s*<td>(\w+)</td>'
                  r'<td>([\d.:]+)</td>.*?<code>([^<]*)</code></td></tr>', re.DOTALL)


@pytest.mark.process
def test_channel_page_lists_the_next_messages_and_opens_one(tmp_path: Path) -> None:
    """A's c2 holds m0..m4 (2 in memory, 3 on disk: handed out m0 m2 m1 m3 m4) and two more: a body that is not
    UTF-8 and one past the peek's 4 KiB cap. Looking through the pages changes nothing on the node."""
    with cluster(NSQD, LOOKUPD, tmp_path) as cl:
        assert request(cl.a.http, "POST", "/pub?topic=t1", b"\xff\xfe")[0] == 200
        assert request(cl.a.http, "POST", "/pub?topic=t1", "é".encode() * 3000)[0] == 200
        nsqadmin = admin(NSQADMIN, tmp_path, f"--lookupd-http-address={cl.lookupd.http}")
        try:
            _, peeked = request(cl.a.http, "GET", "/channel/peek?topic=t1&channel=c2&n=20")
            before = request(cl.a.http, "GET", "/stats?format=json&topic=t1&include_mem=false")[1]
            status, page = request(nsqadmin.http, "GET", "/topics/t1/c2")
            assert status == 200 and "<h2>Messages</h2>" in page
            rows = [row for row in _ROW.findall(page) if row[3] == cl.a.http]  # B has c2 too (from lookupd)
            assert [msg_id for _, msg_id, *_ in rows] == [m["id"] for m in peeked["messages"]]
            previews = [row[4] for row in rows]
            assert previews[:5] == ["m0", "m2", "m1", "m3", "m4"] and previews[5] == "//4="
            assert previews[6] == "é" * 60 + "…" and {row[2] for row in rows} == {"queued"}

            pages = {msg_id: request(nsqadmin.http, "GET", html.unescape(link)) for link, msg_id, *_ in rows}
            assert {status for status, _ in pages.values()} == {200}
            first, binary, big = (pages[m["id"]][1] for m in (peeked["messages"][i] for i in (0, 5, 6)))
            assert '<pre id="body">m0</pre>' in first and "base64" not in first.split("<h2>Body")[1]
            assert '<pre id="body">//4=</pre>' in binary and '<span class="badge">base64</span>' in binary
            assert f'<pre id="body">{"é" * 2048}</pre>' in big and "whole body is 6,000 bytes" in big
            assert "State</th><td>queued" in first and "Attempts</th><td>0" in first

            assert "peek" not in request(nsqadmin.http, "GET", "/api/topics/t1/c2")[1]
            assert request(cl.a.http, "GET", "/stats?format=json&topic=t1&include_mem=false")[1] == before
            missing = f"/topics/t1/c2/message?node={quote(cl.a.http)}&id=0000000000000000"
            assert request(nsqadmin.http, "GET", missing)[0] == 404
            assert request(nsqadmin.http, "GET", "/topics/t1/c2/message?node=127.0.0.1:1&id=x")[0] == 404
        finally:
            nsqadmin.stop()


@pytest.mark.process
def test_with_admin_users_only_they_read_messages(tmp_path: Path) -> None:
    """Bodies are for the admin users, as the actions are: another viewer sees the channel page without them."""
    with cluster(NSQD, LOOKUPD, tmp_path) as cl:
        nsqadmin = admin(NSQADMIN, tmp_path, f"--lookupd-http-address={cl.lookupd.http}", "--admin-user=alice",
                         "--acl-http-header=X-User")
        try:
            _, peeked = request(cl.a.http, "GET", "/channel/peek?topic=t1&channel=c2&n=1")
            link = f"/topics/t1/c2/message?node={quote(cl.a.http)}&id={peeked['messages'][0]['id']}"
            status, page = request(nsqadmin.http, "GET", "/topics/t1/c2", headers={"X-User": "mallory"})
            assert status == 200 and "<h2>Messages</h2>" not in page
            assert request(nsqadmin.http, "GET", link, headers={"X-User": "mallory"})[0] == 403
            status, page = request(nsqadmin.http, "GET", "/topics/t1/c2", headers={"X-User": "alice"})
            assert status == 200 and "<h2>Messages</h2>" in page
            assert request(nsqadmin.http, "GET", link, headers={"X-User": "alice"})[0] == 200
        finally:
            nsqadmin.stop()


def _channel_page(**data: object) -> str:
    base = {"node": "*", "topic_name": "t", "channel_name": "ch", "depth": 0, "memory_depth": 0, "backend_depth": 0,
            "in_flight_count": 0, "deferred_count": 0, "requeue_count": 0, "timeout_count": 0, "message_count": 0,
            "client_count": 0, "nodes": None, "clients": None, "paused": False, "e2e_processing_latency": None,
            "message": ""}
    return template_environment().get_template("channel.html").render(
        base="/", section="topics", charts=Charts(AdminOptions()), lookupds=[], now_ms=1_000_000, statsd_interval=60,
        data={**base, **data}, topic="t", channel="ch")


def test_no_node_that_peeks_leaves_the_channel_page_as_it_was() -> None:
    """Go's nsqd has no /channel/peek: no Messages section at all, the page as without the feature."""
    plain = _channel_page()
    assert "<h2>Messages</h2>" not in plain
    assert _channel_page(peek={"answered": False, "messages": []}) == plain
    assert 'id="no-messages"' in _channel_page(peek={"answered": True, "messages": []})


def test_a_deferred_and_an_in_flight_message_show_when_they_are_due() -> None:
    body = base64.b64encode(b"hello").decode()
    deferred = shown("n:4151", {"id": "0a" * 8, "state": "deferred", "timestamp": 1, "attempts": 0, "body_size": 5,
                                "truncated": False, "body": body, "deliver_at": 1_030_000})
    flying = shown("n:4151", {"id": "0b" * 8, "state": "in_flight", "timestamp": 1, "attempts": 2, "body_size": 5,
                              "truncated": False, "body": body, "deadline": 1_060_000,
                              "client": {"client_id": "w1", "hostname": "h", "remote_address": "10.0.0.1:5"}})
    page = _channel_page(peek={"answered": True, "messages": [deferred, flying]})
    assert '<td class="num">30.0s</td>' in page and '<td class="num">1m0s</td>' in page
    assert 'href="/t/ch/message' not in page and 'href="/topics/t/ch/message?node=n%3A4151&amp;id=0a0a' in page
    opened = template_environment().get_template("message.html").render(
        base="/", section="topics", charts=Charts(AdminOptions()), lookupds=[], now_ms=1_000_000, statsd_interval=60,
        data={**flying, "message": ""}, topic="t", channel="ch", node="n:4151", msg_id=flying["id"])
    assert "Deadline</th><td>1060000 ms (in 1m0s)" in opened and "w1 h <span class=\"dim\">10.0.0.1:5</span>" in opened
    assert '<pre id="body">hello</pre>' in opened


def test_a_cut_body_is_text_up_to_its_last_whole_character() -> None:
    cut = "é".encode() * 3
    assert body_text({"body": base64.b64encode(cut[:-1]).decode(), "truncated": True}) == ("éé", True)
    assert body_text({"body": base64.b64encode(cut[:-1]).decode(), "truncated": False})[1] is False
