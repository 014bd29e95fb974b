"""nsq_to_http: POST (or GET) every message of a topic to HTTP endpoints, as NSQ's Go tool.

A message is FINed only after an endpoint answered 2xx (GET: 200); anything else, or no answer, REQs it
(relay.py). `--mode=hostpool` (default) prefers endpoints that did not fail lately, `round-robin` takes each
in turn. Requests go through urllib3's keep-alive connection pools (the layer under `requests`: half the CPU
per request of a `requests.Session`, measured), one pool of ``-n`` connections per endpoint.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

import urllib3

from ..client import Message
from ..go.durations import SECOND
from ..go.goflags import FlagSet
from ..runtime.version import version_line
from .common import ClientSettings, add_source_flags, client_settings, log_fatal, log_printf, one_source, user_agent
from .relay import TimerMetrics, host_selector, make_consumers, relay

APP = "nsq_to_http"
_MODES = ("round-robin", "hostpool", "epsilon-greedy")
_DEFAULT_CONTENT_TYPE = "application/octet-stream"


def flag_set() -> FlagSet:
    fs = FlagSet(APP)
    fs.add("version", "bool", False, "print version string")
    fs.add("channel", "string", "nsq_to_http", "nsq channel")
    fs.add("max-in-flight", "int", 200, "max number of messages to allow in flight")
    fs.add("n", "int", 100, "number of concurrent publishers")
    fs.add("mode", "string", "hostpool",
           "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy")
    fs.add("sample", "float", 1.0, "% of messages to publish (float b/w 0 -> 1)")
    fs.add("http-client-connect-timeout", "duration", 2 * SECOND, "timeout for HTTP connect")
    fs.add("http-client-request-timeout", "duration", 20 * SECOND, "timeout for HTTP request")
    fs.add("status-every", "int", 250, "the # of requests between logging status (per handler), 0 disables")
    fs.add("content-type", "string", _DEFAULT_CONTENT_TYPE, "the Content-Type used for POST requests")
    fs.add("header", "list", [], "Adds a custom header to HTTP requests (may be given multiple times)")
    fs.add("post", "list", [],
           "HTTP address to make a POST request to.  data will be in the body (may be given multiple times)")
    fs.add("get", "list", [],
           "HTTP address to make a GET request to. '%s' will be printf replaced with data (may be given multiple "
           "times)")
    add_source_flags(fs, "nsq topic")
    return fs


@dataclass
class Options:
    topic: str
    channel: str
    max_in_flight: int
    publishers: int
    mode: str
    sample: float
    timeout: tuple[float, float]
    status_every: int
    content_type: str
    headers: dict[str, str]
    method: str
    addresses: list[str]
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    consumer: ClientSettings


def parse_options(argv: Sequence[str]) -> Options | None:
    fs = flag_set()
    v = fs.parse(argv).values
    try:
        consumer = client_settings(v["consumer-opt"])
    except ValueError as err:
        log_fatal(f"invalid --consumer-opt - {err}")
    if v["version"]:
        print(version_line(APP))
        return None
    topics = v["topic"]
    if len(topics) != 1 or not v["channel"]:
        log_fatal("--topic and --channel are required")
    if v["content-type"] != _DEFAULT_CONTENT_TYPE:
        if not v["post"]:
            log_fatal("--content-type only used with --post")
        if not v["content-type"]:
            log_fatal("--content-type requires a value when used")
    nsqds, lookupds = one_source(v)
    gets, posts = v["get"], v["post"]
    if not gets and not posts:
        log_fatal("--get or --post required")
    if gets and posts:
        log_fatal("use --get or --post not both")
    if any(get.count("%s") != 1 for get in gets):
        log_fatal("invalid GET address - must be a printf string")
    if v["mode"] not in _MODES:
        log_fatal(f"invalid --mode '{v['mode']}' (round-robin, hostpool, epsilon-greedy)")
    if not 0.0 <= v["sample"] <= 1.0:
        log_fatal("ERROR: --sample must be between 0.0 and 1.0")
    headers = {}
    for header in v["header"]:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            log_fatal(f"Invalid header {header!r}, must be in the form 'key: value'")
        headers[name.strip()] = value.strip()
    return Options(topics[0], v["channel"], v["max-in-flight"], v["n"], v["mode"], v["sample"],
                   (v["http-client-connect-timeout"] / SECOND, v["http-client-request-timeout"] / SECOND),
                   v["status-every"], v["content-type"], headers, "POST" if posts else "GET", posts or gets,
                   nsqds, lookupds, consumer)


class HTTPPublisher:
    """Sends one message to one endpoint chosen by the mode; True on 2xx (GET: 200)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.hosts = host_selector(opts.mode, opts.addresses)
        self._hosts_lock = threading.Lock()
        self._pool = urllib3.PoolManager(maxsize=max(1, opts.publishers), retries=False,
                                         timeout=urllib3.Timeout(connect=opts.timeout[0], read=opts.timeout[1]))
        self._headers = {"User-Agent": user_agent(APP), **opts.headers}
        self.aggregate = TimerMetrics(opts.status_every, "[aggregate]:")
        every = 0 if len(opts.addresses) == 1 else opts.status_every  # one endpoint: the aggregate says it all
        self.per_address = {addr: TimerMetrics(every, f"[{addr}]:") for addr in opts.addresses}
        self._metrics_lock = threading.Lock()

    def __call__(self, _topic: str, msgs: list[Message]) -> bool:
        (msg,) = msgs  # one request per message: relay's batch is 1 here
        with self._hosts_lock:
            addr = self.hosts.get()
        started = time.monotonic()
        try:
            ok = self._send(addr, msg.body)
        except urllib3.exceptions.HTTPError as err:
            log_printf(f"ERROR: {self.opts.method} {addr} - {err}")
            ok = False
        with self._hosts_lock:
            self.hosts.mark(addr, ok)
        if ok:
            with self._metrics_lock:
                self.per_address[addr].status(started)
                self.aggregate.status(started)
        return ok

    def _send(self, addr: str, body: bytes) -> bool:
        url = addr if "://" in addr else f"http://{addr}"
        if self.opts.method == "POST":
            reply = self._pool.request("POST", url, body=body,
                                       headers={**self._headers, "Content-Type": self.opts.content_type})
            ok = 200 <= reply.status < 300
        else:
            reply = self._pool.request("GET", url.replace("%s", urllib.parse.quote_plus(body)), headers=self._headers)
            ok = reply.status == 200
        if not ok:
            log_printf(f"ERROR: {self.opts.method} {addr} - got status code {reply.status}")
        return ok


def run(opts: Options) -> None:
    consumers = make_consumers(APP, [opts.topic], opts.channel, opts.nsqd_tcp_addresses,
                               opts.lookupd_http_addresses, opts.max_in_flight, opts.consumer)
    relay(consumers, HTTPPublisher(opts), opts.consumer, workers=opts.publishers, sample=opts.sample)
