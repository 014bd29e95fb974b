"""nsq_stat: poll `/stats` of every nsqd that has a topic and print one channel's totals as a table.

Flags, messages and table as in NSQ's Go tool: the first poll only prints the header (rates need two
samples), then one row per --interval, a header again every 25 reports, and exit 0 after --count rows.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..client import HTTPError, lookup_producers, nsqd_stats
from ..go.durations import SECOND
from ..go.goflags import parse_int
from ..go.settings import BOOL, DURATION, LIST, STRING, custom, setting
from ..wire.http_auth import secret_or_env
from .common import HTTPTimeoutOptions, log_fatal, parse_tool_flags, printed_version
from .stat_table import HEADER, HEADER_EVERY, ChannelTotals, channel_totals, row

APP = "nsq_stat"


def _set_count(text: str, _current: Any) -> int:
    return parse_int(text, 10, 32)


@dataclass
class StatOptions(HTTPTimeoutOptions):
    version: bool = setting("version", BOOL, False, "print version")
    topic: str = setting("topic", STRING, "", "NSQ topic")
    channel: str = setting("channel", STRING, "", "NSQ channel")
    interval_ns: int = setting("interval", DURATION, 2 * SECOND, "duration of time between polling/printing output")
    status_every: int = setting("status-every", DURATION, 0, "(deprecated) use --interval")
    count: int | None = setting("count", custom(_set_count, show=lambda _v: "N"), None, "number of reports")
    nsqd_http_addresses: list[str] = setting("nsqd-http-address", LIST, [],
                                             "nsqd HTTP address (may be given multiple times)")
    lookupd_http_addresses: list[str] = setting("lookupd-http-address", LIST, [],
                                                "lookupd HTTP address (may be given multiple times)")
    http_auth_secret: str = setting("http-auth-secret", STRING, "", "secret sent to nsqd as 'Authorization: Bearer "
                                    "<secret>' (nsqd --http-auth-required; else from $NSQ_HTTP_AUTH_SECRET) "
                                    "(beyond nsqd)")

    @property
    def interval(self) -> float:
        """Seconds between reports (the deprecated --status-every wins when given)."""
        return (self.status_every or self.interval_ns) / SECOND


def parse_options(argv: Sequence[str]) -> StatOptions | None:
    """Flags to StatOptions with the Go tool's checks; None after --version."""
    opts = parse_tool_flags(StatOptions, APP, argv)
    if printed_version(opts.version, APP):
        return None
    if not opts.topic or not opts.channel:
        log_fatal("--topic and --channel are required")
    if opts.interval <= 0:
        log_fatal("--interval should be positive")
    opts.check_http_timeouts()
    if opts.count is not None and opts.count <= 0:
        log_fatal("--count should be positive")
    nsqds, lookupds = opts.nsqd_http_addresses, opts.lookupd_http_addresses
    if not nsqds and not lookupds:
        log_fatal("--nsqd-http-address or --lookupd-http-address required")
    if nsqds and lookupds:
        log_fatal("use --nsqd-http-address or --lookupd-http-address not both")
    for flag, addresses in (("--nsqd-http-address", nsqds), ("--lookupd-http-address", lookupds)):
        if any(a.startswith("http") for a in addresses):
            log_fatal(f"{flag} error - address should not contain scheme")
    return opts


def poll(opts: StatOptions) -> ChannelTotals:
    """One sample: find the nsqd that have the topic, then sum the channel's stats over them."""
    try:
        if opts.lookupd_http_addresses:
            producers = sorted({a for lookupd in opts.lookupd_http_addresses
                                for a in lookup_producers(lookupd, opts.topic, opts.http_timeout, port="http_port")})
        else:  # asking each nsqd whether it has the topic already returns its stats
            stats = [_stats(addr, opts) for addr in opts.nsqd_http_addresses]
    except HTTPError as err:
        log_fatal(f"ERROR: failed to get topic producers - {err}")
    if opts.lookupd_http_addresses:
        try:
            stats = [_stats(addr, opts) for addr in producers]
        except HTTPError as err:
            log_fatal(f"ERROR: failed to get nsqd stats - {err}")
    stats = [doc for doc in stats if any(t["topic_name"] == opts.topic for t in doc.get("topics") or [])]
    if not stats:  # no nsqd has the topic: Go queries none of them, and says so
        log_fatal("ERROR: failed to get nsqd stats - failed to query any nsqd: ")
    totals = channel_totals(stats, opts.topic, opts.channel)
    if totals is None:
        log_fatal(f"ERROR: failed to find channel({opts.channel}) in stats metadata for topic({opts.topic})")
    return totals


def _stats(address: str, opts: StatOptions) -> dict[str, Any]:
    return nsqd_stats(address, opts.topic, include_clients=False, timeout=opts.http_timeout,
                      auth_secret=secret_or_env(opts.http_auth_secret))


def stat_loop(opts: StatOptions) -> None:
    previous: ChannelTotals | None = None
    i = 0
    while opts.count is None or opts.count >= i:
        current = poll(opts)
        if i % HEADER_EVERY == 0:
            print(HEADER, flush=True)
        if previous is not None:
            print(row(current, previous, opts.interval), flush=True)
        previous = current
        i += 1
        time.sleep(opts.interval)


def run(opts: StatOptions) -> None:
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sys.exit(0))
    stat_loop(opts)
