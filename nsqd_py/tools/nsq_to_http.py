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
from dataclasses import dataclass, field

import urllib3

from ..client import Message
from ..go.durations import SECOND
from ..go.settings import DURATION, FLOAT, INT, LIST, STRING, setting
from .common import (
    HTTPTimeoutOptions,
    SourceOptions,
    log_fatal,
    log_printf,
    parse_tool_flags,
    printed_version,
    read_client_settings,
    user_agent,
)
from .relay import MODE_USAGE, TimerMetrics, check_mode, host_selector, make_consumers, relay

APP = "nsq_to_http"
_DEFAULT_CONTENT_TYPE = "application/octet-stream"


@dataclass
class ToHTTPOptions(SourceOptions, HTTPTimeoutOptions):
    topics: list[str] = setting("topic", LIST, [], "nsq topic")
    channel: str = setting("channel", STRING, "nsq_to_http", "nsq channel")
    publishers: int = setting("n", INT, 100, "number of concurrent publishers")
    mode: str = setting("mode", STRING, "hostpool", MODE_USAGE)
    sample: float = setting("sample", FLOAT, 1.0, "% of messages to publish (float b/w 0 -> 1)")
    http_client_request_timeout: int = setting("http-client-request-timeout", DURATION, 20 * SECOND,
                                               "timeout for HTTP request")
    status_every: int = setting("status-every", INT, 250,
                                "the # of requests between logging status (per handler), 0 disables")
    content_type: str = setting("content-type", STRING, _DEFAULT_CONTENT_TYPE,
                                "the Content-Type used for POST requests")
    header_lines: list[str] = setting("header", LIST, [],
                                      "Adds a custom header to HTTP requests (may be given multiple times)")
    posts: list[str] = setting("post", LIST, [], "HTTP address to make a POST request to.  data will be in the body "
                               "(may be given multiple times)")
    gets: list[str] = setting("get", LIST, [], "HTTP address to make a GET request to. '%s' will be printf replaced "
                              "with data (may be given multiple times)")
    #: the parsed `header_lines`
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return self.topics[0]

    @property
    def method(self) -> str:
        return "POST" if self.posts else "GET"

    @property
    def addresses(self) -> list[str]:
        return self.posts or self.gets


def parse_options(argv: Sequence[str]) -> ToHTTPOptions | None:
    opts = parse_tool_flags(ToHTTPOptions, APP, argv)
    opts.consumer = read_client_settings(opts.consumer_opts, "invalid --consumer-opt")
    if printed_version(opts.version, APP):
        return None
    if len(opts.topics) != 1 or not opts.channel:
        log_fatal("--topic and --channel are required")
    if opts.content_type != _DEFAULT_CONTENT_TYPE:
        if not opts.posts:
            log_fatal("--content-type only used with --post")
        if not opts.content_type:
            log_fatal("--content-type requires a value when used")
    opts.check_one_source()
    if not opts.gets and not opts.posts:
        log_fatal("--get or --post required")
    if opts.gets and opts.posts:
        log_fatal("use --get or --post not both")
    if any(get.count("%s") != 1 for get in opts.gets):
        log_fatal("invalid GET address - must be a printf string")
    check_mode(opts.mode)
    if not 0.0 <= opts.sample <= 1.0:
        log_fatal("ERROR: --sample must be between 0.0 and 1.0")
    for header in opts.header_lines:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            log_fatal(f"Invalid header {header!r}, must be in the form 'key: value'")
        opts.headers[name.strip()] = value.strip()
    return opts


class HTTPPublisher:
    """Sends one message to one endpoint chosen by the mode; True on 2xx (GET: 200)."""

    def __init__(self, opts: ToHTTPOptions) -> None:
        self.opts = opts
        self.hosts = host_selector(opts.mode, opts.addresses)
        self._hosts_lock = threading.Lock()
        connect, read = opts.http_timeout
        self._pool = urllib3.PoolManager(maxsize=max(1, opts.publishers), retries=False,
                                         timeout=urllib3.Timeout(connect=connect, read=read))
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


def run(opts: ToHTTPOptions) -> None:
    consumers = make_consumers(APP, [opts.topic], opts.channel, opts.nsqd_tcp_addresses,
                               opts.lookupd_http_addresses, opts.max_in_flight, opts.consumer)
    relay(consumers, HTTPPublisher(opts), opts.consumer, workers=opts.publishers, sample=opts.sample)
