"""Routing like nsqd's httprouter: 404, 405 + Allow, OPTIONS, HEAD, trailing-slash and case redirects."""

from __future__ import annotations

import re

import pytest

from tests.http.http_support import NsqdFactory, parse_raw_reply, raw_exchange
from tests.inprocess import InProcessNsqd
from tests.support import NsqdProcess, request

ALLOW = {
    "/ping": "GET, OPTIONS",
    "/info": "GET, OPTIONS",
    "/stats": "GET, OPTIONS",
    "/pub": "OPTIONS, POST",
    "/mpub": "OPTIONS, POST",
    **{f"/{kind}/{action}": "OPTIONS, POST" for kind in ("topic", "channel")
       for action in ("create", "delete", "empty", "pause", "unpause")},
    "/config/msg_timeout": "GET, OPTIONS, PUT",
}


@pytest.mark.parametrize(("path", "allow"), ALLOW.items())
def test_wrong_method_is_405_with_allow(inproc: InProcessNsqd, path: str, allow: str) -> None:
    method = "DELETE" if "PUT" in allow else ("POST" if "GET" in allow else "GET")
    reply = inproc.request(method, path)
    assert reply.status == 405
    assert reply.header("Allow") == allow
    assert reply.header("Content-Type") == "application/json; charset=utf-8"
    assert reply.header("X-Nsq-Content-Type") == "nsq; version=1.0"
    assert reply.body == b'{"message":"METHOD_NOT_ALLOWED"}'


@pytest.mark.parametrize(("path", "allow"), ALLOW.items())
def test_options_answers_allow_and_nothing_else(inproc: InProcessNsqd, path: str, allow: str) -> None:
    reply = inproc.request("OPTIONS", path)
    assert reply.status == 200
    assert reply.header("Allow") == allow
    assert reply.header("Content-Length") == "0" and reply.body == b""
    assert reply.header("Content-Type") is None and reply.header("X-Nsq-Content-Type") is None


def test_head_is_not_routed(inproc: InProcessNsqd) -> None:
    reply = inproc.request("HEAD", "/ping")
    assert reply.status == 405
    assert reply.header("Allow") == "GET, OPTIONS"
    assert reply.header("Content-Length") == "32", "the length of the body a GET-less 405 would have"
    assert reply.body == b""


def test_unknown_method_is_405_on_a_known_path_and_404_elsewhere(inproc: InProcessNsqd) -> None:
    assert inproc.request("BREW", "/pub").header("Allow") == "OPTIONS, POST"
    assert inproc.request("BREW", "/coffee").status == 404


@pytest.mark.parametrize("path", ["/", "/nope", "/PUB/x", "/config", "/config/", "/config/a/b", "/topic", "/topic/",
                                  "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile", "/stats/x"])
def test_unknown_paths_are_404(inproc: InProcessNsqd, path: str) -> None:
    reply = inproc.request("GET", path)
    assert reply.status == 404
    assert reply.body == b'{"message":"NOT_FOUND"}'
    assert reply.header("X-Nsq-Content-Type") == "nsq; version=1.0"


def test_debug_routes_answer_like_unknown_ones(inproc: InProcessNsqd) -> None:
    assert inproc.request("PUT", "/debug/setblockrate?rate=1").status == 404
    assert inproc.request("POST", "/debug/freememory").status == 404
    assert inproc.request("OPTIONS", "/debug/pprof/").status == 404


@pytest.mark.parametrize(("path", "location"), [
    ("/ping/", "/ping"),
    ("/stats/?format=json&topic=a", "/stats?format=json&topic=a"),
    ("/config/msg_timeout/", "/config/msg_timeout"),
    ("/PING", "/ping"),
    ("/Stats?format=json", "/stats?format=json"),
    ("/CONFIG/msg_timeout", "/config/msg_timeout"),
    ("/INFO/", "/info"),
    ("//ping", "/ping"),
    ("/stats/../ping", "/ping"),
])
def test_get_redirects_permanently_with_a_small_html_body(inproc: InProcessNsqd, path: str,
                                                          location: str) -> None:
    reply = inproc.request("GET", path)
    assert reply.status == 301
    assert reply.header("Location") == location
    assert reply.header("Content-Type") == "text/html; charset=utf-8"
    escaped = location.replace("&", "&amp;")
    assert reply.body == f'<a href="{escaped}">Moved Permanently</a>.\n\n'.encode()
    assert reply.header("X-Nsq-Content-Type") is None


@pytest.mark.parametrize(("method", "path", "location"), [
    ("POST", "/pub/?topic=a", "/pub?topic=a"),
    ("POST", "/Topic/Create?topic=a", "/topic/create?topic=a"),
    ("PUT", "/config/log_level/", "/config/log_level"),
])
def test_other_methods_redirect_temporarily_without_body(inproc: InProcessNsqd, method: str, path: str,
                                                         location: str) -> None:
    reply = inproc.request(method, path, b"x")
    assert reply.status == 307
    assert reply.header("Location") == location
    assert reply.body == b"" and reply.header("Content-Type") is None


def test_redirect_only_within_the_methods_routes(inproc: InProcessNsqd) -> None:
    assert inproc.request("GET", "/pub/").status == 404, "no GET route at /pub"
    assert inproc.request("OPTIONS", "/ping/").status == 404, "no OPTIONS routes at all"
    assert inproc.request("HEAD", "/ping/").status == 404


def test_server_wide_options(shared_nsqd: NsqdProcess) -> None:
    reply = parse_raw_reply(raw_exchange(shared_nsqd.http_port, b"OPTIONS * HTTP/1.1\r\nHost: x\r\n"
                                                                 b"Connection: close\r\n\r\n"))
    assert reply.status == 200 and reply.header("Content-Length") == "0" and reply.header("Allow") is None
    reply = parse_raw_reply(raw_exchange(shared_nsqd.http_port, b"GET * HTTP/1.1\r\nHost: x\r\n"
                                                                 b"Connection: close\r\n\r\n"))
    assert reply.status == 405 and reply.header("Allow") == "GET, OPTIONS, POST, PUT"


def test_404_and_405_are_logged_but_redirects_and_options_are_not(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory()
    port = nsqd.http_port
    request(port, "GET", "/nope?x=1")
    request(port, "GET", "/pub")
    request(port, "GET", "/ping/")
    request(port, "OPTIONS", "/pub")
    log = nsqd.log()
    assert re.search(r"INFO: 404 GET /nope\?x=1 \(127\.0\.0\.1:\d+\) \S+\n", log)
    assert re.search(r"INFO: 405 GET /pub \(127\.0\.0\.1:\d+\) \S+\n", log)
    assert "/ping/" not in log and "OPTIONS" not in log
