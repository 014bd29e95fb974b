"""to_nsq | nsqd | nsq_tail, and nsq_stat's table against /stats — all as real processes."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import requests

from nsqd_py.testing import free_port
from tests.support import NsqdProcess, channel_stats, drain, unique, wait_until
from tests.tools.support import FakeLookupd, Tool, curl_pub, run_tool

pytestmark = pytest.mark.process  # starts real processes: left out of `make check`


def create_channel(nsqd: NsqdProcess, topic: str, channel: str) -> None:
    reply = requests.post(f"{nsqd.http_url}/channel/create", params={"topic": topic, "channel": channel}, timeout=5)
    assert reply.status_code == 200, reply.text


def tail_subscribed(nsqd: NsqdProcess, topic: str) -> bool:
    for t in nsqd.stats(topic=topic)["topics"] or []:
        return any(c["client_count"] for c in t["channels"])
    return False


def test_to_nsq_into_nsq_tail(shared_nsqd: NsqdProcess, tmp_path: Path) -> None:
    topic = unique("pipe")
    lines = [f"hello {i}" for i in range(20)]
    tail = Tool(tmp_path, "nsq_tail", f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", "-n=20")
    try:
        wait_until(lambda: tail_subscribed(shared_nsqd, topic), timeout=15)  # an ephemeral channel sees only new
        sent = run_tool("to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={shared_nsqd.tcp_address}",
                        input="\n".join(lines).encode() + b"\n\n")
        assert sent.returncode == 0, sent.stderr
        assert tail.wait(15) == 0
    finally:
        tail.kill()
    assert tail.stdout().splitlines() == lines, "stdout carries the messages only"
    assert re.search(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d Adding consumer for topic: " + topic + "$", tail.stderr(), re.M)
    assert re.search(r"INF +1 \[" + topic + r"/tail\d{6}#ephemeral\] \(127\.0\.0\.1:\d+\) connecting to nsqd",
                     tail.stderr()), tail.stderr()


def test_nsq_tail_print_topic_several_topics_and_sigterm(shared_nsqd: NsqdProcess, tmp_path: Path) -> None:
    a, b = unique("ta"), unique("tb")
    tail = Tool(tmp_path, "nsq_tail", f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={a}",
                f"--topic={b}", "--print-topic", "--channel=keep")
    try:
        wait_until(lambda: tail_subscribed(shared_nsqd, a) and tail_subscribed(shared_nsqd, b), timeout=15)
        curl_pub(shared_nsqd, a, ["1"])
        curl_pub(shared_nsqd, b, ["2"])
        wait_until(lambda: len(tail.stdout().splitlines()) == 2, timeout=10)
        assert tail.stop() == 0
    finally:
        tail.kill()
    assert sorted(tail.stdout().splitlines()) == sorted([f"{a} | 1", f"{b} | 2"])
    assert f"Adding consumer for topic: {a}\n" in tail.stderr() and f"Adding consumer for topic: {b}\n" in tail.stderr()
    assert channel_stats(shared_nsqd, a, "keep")["client_count"] == 0


def test_to_nsq_delimiter_rate_and_every_nsqd(nsqd_factory, tmp_path: Path) -> None:
    """Each record goes to every --nsqd-tcp-address; --rate 10 makes 6 records take about half a second."""
    first, second = nsqd_factory(), nsqd_factory()
    start = time.monotonic()
    sent = run_tool("to_nsq", "--topic=csv", "--delimiter=,", "--rate=10", f"--nsqd-tcp-address={first.tcp_address}",
                    f"--nsqd-tcp-address={second.tcp_address}", input=b"a,b,,c,d,e,f")
    elapsed = time.monotonic() - start
    assert sent.returncode == 0, sent.stderr
    assert b"Throttling messages rate to max:10/second" in sent.stderr
    assert elapsed >= 0.45
    for nsqd in (first, second):
        assert [m.body for m in drain(nsqd.tcp_port, "csv", "ch", idle=0.5)] == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_to_nsq_publishes_once_per_distinct_address(nsqd_factory) -> None:
    """The same --nsqd-tcp-address twice is one producer (Go keeps a map of them), so each line arrives once."""
    nsqd = nsqd_factory()
    sent = run_tool("to_nsq", "--topic=dup", f"--nsqd-tcp-address={nsqd.tcp_address}",
                    f"--nsqd-tcp-address={nsqd.tcp_address}", input=b"one\ntwo\n")
    assert sent.returncode == 0, sent.stderr
    assert [m.body for m in drain(nsqd.tcp_port, "dup", "ch", idle=0.5)] == [b"one", b"two"]


def test_nsq_stat_unknown_topic_says_what_go_says(shared_nsqd: NsqdProcess) -> None:
    out = run_tool("nsq_stat", f"--topic={unique('nosuch')}", "--channel=c",
                   f"--nsqd-http-address=127.0.0.1:{shared_nsqd.http_port}", "--count=1")
    assert out.returncode == 1
    line = r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ERROR: failed to get nsqd stats - failed to query any nsqd: \n"
    assert re.fullmatch(line, out.stderr.decode()), out.stderr


def test_nsq_stat_rows_match_stats(shared_nsqd: NsqdProcess) -> None:
    topic = unique("stat")
    curl_pub(shared_nsqd, topic, ["x"] * 7)  # held by the topic, then handed to its first channel
    create_channel(shared_nsqd, topic, "c")
    curl_pub(shared_nsqd, topic, ["y"] * 5)
    out = run_tool("nsq_stat", f"--topic={topic}", "--channel=c",
                   f"--nsqd-http-address=127.0.0.1:{shared_nsqd.http_port}", "--interval=100ms", "--count=2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert lines[0] == "------rate------+----------------depth----------------+--------------metadata---------------"
    assert lines[1] == "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients"
    assert len(lines) == 4
    stats = channel_stats(shared_nsqd, topic, "c")
    expected = [0, 0, stats["depth"], stats["depth"] - stats["backend_depth"], stats["backend_depth"],
                stats["in_flight_count"], stats["deferred_count"], stats["requeue_count"], stats["timeout_count"],
                stats["message_count"], stats["client_count"]]
    assert expected[2] == 12 and expected[9] == 12
    for row in lines[2:]:
        assert [int(v) for v in row.replace("|", " ").split()] == expected


def test_nsq_stat_through_lookupd_and_missing_channel(shared_nsqd: NsqdProcess) -> None:
    topic = unique("statl")
    curl_pub(shared_nsqd, topic, ["z"])
    lookupd = FakeLookupd([shared_nsqd], [topic])
    try:
        missing = run_tool("nsq_stat", f"--topic={topic}", "--channel=nope",
                           f"--lookupd-http-address={lookupd.address}", "--count=1")
        create_channel(shared_nsqd, topic, "c")
        ok = run_tool("nsq_stat", f"--topic={topic}", "--channel=c", f"--lookupd-http-address={lookupd.address}",
                      "--interval=50ms", "--count=1")
    finally:
        lookupd.stop()
    assert missing.returncode == 1
    assert f"ERROR: failed to find channel(nope) in stats metadata for topic({topic})" in missing.stderr.decode()
    assert ok.returncode == 0 and len(ok.stdout.decode().splitlines()) == 3


@pytest.mark.parametrize("tool", ["to_nsq", "nsq_tail", "nsq_stat"])
def test_unknown_flag_prints_usage_and_exits_2(tool: str) -> None:
    out = run_tool(tool, "--nope")
    assert out.returncode == 2
    assert out.stderr.decode().startswith(f"flag provided but not defined: -nope\nUsage of {tool}:\n")


@pytest.mark.parametrize(("tool", "args", "message"), [
    ("to_nsq", [], "--topic required"),
    ("to_nsq", ["--topic=t", "--delimiter=ab"], "--delimiter must be a single byte"),
    ("to_nsq", ["--topic=t"], "--nsqd-tcp-address required"),
    ("nsq_tail", [], "--nsqd-tcp-address or --lookupd-http-address required"),
    ("nsq_tail", ["--nsqd-tcp-address=a:1"], "--topic required"),
    ("nsq_stat", ["--topic=t"], "--topic and --channel are required"),
    ("nsq_stat", ["--topic=t", "--channel=c", "--count=0"], "--count should be positive"),
    ("nsq_stat", ["--topic=t", "--channel=c", "--nsqd-http-address=http://x:1"],
     "--nsqd-http-address error - address should not contain scheme"),
])
def test_bad_options_exit_1(tool: str, args: list[str], message: str) -> None:
    out = run_tool(tool, *args)
    assert out.returncode == 1 and message in out.stderr.decode(), out.stderr


def test_to_nsq_unreachable_nsqd_fails_clearly() -> None:
    address = f"127.0.0.1:{free_port()}"
    out = run_tool("to_nsq", "--topic=t", f"--nsqd-tcp-address={address}", input=b"x\n")
    assert out.returncode == 1
    assert out.stderr.decode().endswith(f" dial tcp {address}: connect: connection refused\n"), out.stderr


def test_versions() -> None:
    for tool in ("nsq_tail", "nsq_stat"):
        out = run_tool(tool, "--version")
        assert out.returncode == 0 and out.stdout.decode().startswith(f"{tool} v1.3.0"), out
