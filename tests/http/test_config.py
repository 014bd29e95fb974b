"""GET /config/<opt> for every option, PUT for nsqlookupd_tcp_addresses and log_level."""

from __future__ import annotations

import json

import pytest

from nsqd_py.config.options import CONFIG_KEYS
from tests.http.http_support import NsqdFactory
from tests.inprocess import InProcessNsqd
from tests.support import NsqdProcess, Reply, request

JSON = "application/json; charset=utf-8"


def _value(reply: Reply) -> object:
    assert reply.status == 200, reply.body
    assert reply.header("Content-Type") == JSON
    assert reply.header("X-Nsq-Content-Type") == "nsq; version=1.0"
    return reply.json()


def _error(reply: Reply, status: int, text: str) -> None:
    assert (reply.status, reply.json()) == (status, {"message": text})


@pytest.mark.parametrize("key", sorted(CONFIG_KEYS))
def test_every_option_is_readable(inproc: InProcessNsqd, key: str) -> None:
    reply = inproc.request("GET", f"/config/{key}")
    assert reply.status == 200
    assert reply.header("X-Nsq-Content-Type") == "nsq; version=1.0"
    content_type = reply.header("Content-Type")
    if content_type == JSON:
        json.loads(reply.body)
    else:  # nsqd answers a string option raw, like any string result; an empty one with no type at all
        assert content_type == ("text/plain; charset=utf-8" if reply.body else None)


@pytest.mark.parametrize(("key", "raw"), [
    ("msg_timeout", b"60000000000"),
    ("max_req_timeout", b"600000000000"),  # --max-req-timeout=10m
    ("log_level", b"2"),
    ("tls_min_version", b"769"),
    ("tls_required", b"0"),
    ("nsqlookupd_tcp_addresses", b"[]"),
    ("e2e_processing_latency_percentiles", b"[]"),
    ("mem_queue_size", b"10000"),
    ("statsd_mem_stats", b"true"),
])
def test_values_are_nsqds_internal_ones(inproc: InProcessNsqd, key: str, raw: bytes) -> None:
    reply = inproc.request("GET", f"/config/{key}")
    assert (reply.body, reply.header("Content-Type")) == (raw, JSON)


def test_string_options_come_back_raw(shared_nsqd: NsqdProcess) -> None:
    port = shared_nsqd.http_port
    reply = request(port, "GET", "/config/data_path")
    assert (reply.body, reply.header("Content-Type")) == (str(shared_nsqd.data_path).encode(),
                                                          "text/plain; charset=utf-8")
    reply = request(port, "GET", "/config/topology_zone")
    assert (reply.status, reply.body, reply.header("Content-Type")) == (200, b"", None)
    assert reply.header("Content-Length") == "0"
    prefix = request(port, "GET", "/config/statsd_prefix").body.decode()
    assert prefix.startswith("nsq.") and prefix.endswith(f"_{port}."), "expanded like nsqd's"


@pytest.mark.parametrize("key", ["nope", "queue_scan_interval", "config", "version", "MSG_TIMEOUT"])
def test_unknown_options(inproc: InProcessNsqd, key: str) -> None:
    _error(inproc.request("GET", f"/config/{key}"), 400, "INVALID_OPTION")


def test_put_log_level_changes_logging(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory()
    port = nsqd.http_port
    assert request(port, "PUT", "/config/log_level", b"debug").body == b"1"
    assert request(port, "GET", "/config/log_level").body == b"1"
    assert request(port, "PUT", "/config/log_level", b"WARN").body == b"3"
    request(port, "GET", "/info?quiet")
    assert "/info?quiet" not in nsqd.log(), "INFO access lines are below WARN"
    assert request(port, "PUT", "/config/log_level", b"Info").body == b"2"
    request(port, "GET", "/info?loud")
    assert "INFO: 200 GET /info?loud" in nsqd.log()


@pytest.mark.parametrize(("body", "status"), [
    (b"loud", 400), (b"warning", 400), (b" info", 400), (b"info\n", 400), (b"\xff", 400), (b"", 413),
])
def test_put_bad_log_level(nsqd_factory: NsqdFactory, body: bytes, status: int) -> None:
    nsqd = nsqd_factory()
    _error(request(nsqd.http_port, "PUT", "/config/log_level", body), status, "INVALID_VALUE")
    assert request(nsqd.http_port, "GET", "/config/log_level").body == b"2"


def test_put_lookupd_addresses(nsqd_factory: NsqdFactory) -> None:
    port = nsqd_factory().http_port
    body = b'["127.0.0.1:4160", "lookupd:4160"]'
    assert _value(request(port, "PUT", "/config/nsqlookupd_tcp_addresses", body)) == ["127.0.0.1:4160",
                                                                                      "lookupd:4160"]
    assert _value(request(port, "GET", "/config/nsqlookupd_tcp_addresses")) == ["127.0.0.1:4160", "lookupd:4160"]
    assert _value(request(port, "PUT", "/config/nsqlookupd_tcp_addresses", b"[]")) == []


@pytest.mark.parametrize("body", [b"127.0.0.1:4160", b'"a:1"', b"[1]", b'{"a": 1}', b'["a"] x'])
def test_put_bad_lookupd_addresses(inproc: InProcessNsqd, body: bytes) -> None:
    _error(inproc.request("PUT", "/config/nsqlookupd_tcp_addresses", body), 400, "INVALID_VALUE")


def test_put_body_is_judged_before_the_option(inproc: InProcessNsqd) -> None:
    _error(inproc.request("PUT", "/config/msg_timeout", b"1s"), 400, "INVALID_OPTION")
    _error(inproc.request("PUT", "/config/nope", b""), 413, "INVALID_VALUE")
    _error(inproc.request("PUT", "/config/nope"), 413, "INVALID_VALUE")


def test_put_body_limit_is_max_msg_size(nsqd_factory: NsqdFactory) -> None:
    port = nsqd_factory("--max-msg-size=10").http_port
    _error(request(port, "PUT", "/config/nsqlookupd_tcp_addresses", b'["a:1","b:2"]'), 413, "INVALID_VALUE")
    assert _value(request(port, "PUT", "/config/nsqlookupd_tcp_addresses", b'["a:1"]')) == ["a:1"]
