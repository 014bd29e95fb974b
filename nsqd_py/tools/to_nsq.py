"""to_nsq: publish stdin, split on --delimiter, to a topic on every --nsqd-tcp-address (as NSQ's Go tool).

Each chunk goes to every nsqd given (not round-robin), empty chunks are skipped, --rate throttles to n
messages per second with up to one second of burst. A publish that still fails after the producer's
retries is fatal (exit 1), like the Go tool's `log.Fatal`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from ..client import NSQError, Producer
from ..go.settings import INT, LIST, STRING, setting
from .common import (
    PRODUCER_OPT_USAGE,
    ClientSettings,
    go_dial_error,
    log_fatal,
    parse_tool_flags,
    read_client_settings,
    user_agent,
)

APP = "to_nsq"


@dataclass
class ToNsqOptions:
    topic: str = setting("topic", STRING, "", "NSQ topic to publish to")
    delimiter_text: str = setting("delimiter", STRING, "\n", "character to split input from stdin")
    nsqd_tcp_addresses: list[str] = setting("nsqd-tcp-address", LIST, [],
                                            "destination nsqd TCP address (may be given multiple times)")
    producer_opts: list[str] = setting("producer-opt", LIST, [], PRODUCER_OPT_USAGE)
    rate: int = setting("rate", INT, 0, "Throttle messages to n/second. 0 to disable")
    #: the parsed `producer_opts`
    producer: ClientSettings = field(default_factory=ClientSettings)

    @property
    def delimiter(self) -> bytes:
        return self.delimiter_text.encode("utf-8", "surrogateescape")


def parse_options(argv: Sequence[str]) -> ToNsqOptions:
    opts = parse_tool_flags(ToNsqOptions, APP, argv)
    opts.producer = read_client_settings(opts.producer_opts, "invalid --producer-opt")
    if not opts.topic:
        log_fatal("--topic required")
    if len(opts.delimiter) != 1:
        log_fatal("--delimiter must be a single byte")
    if not opts.nsqd_tcp_addresses:
        log_fatal("--nsqd-tcp-address required")
    return opts


def records(stream: BinaryIO, delimiter: bytes) -> Iterator[bytes]:
    """Non-empty chunks of ``stream`` without their delimiter, yielded as soon as they are complete."""
    rest = b""
    fd = stream.fileno()
    while chunk := os.read(fd, 65536):
        parts = (rest + chunk).split(delimiter)
        rest = parts.pop()
        yield from (p for p in parts if p)
    if rest:
        yield rest


class Throttle:
    """The Go tool's token bucket: one message per 1/rate s, at most `rate` saved up."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self._balance = 1.0
        self._last = time.monotonic()

    def wait(self) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        self._balance = min(float(self.rate), self._balance + (now - self._last) / self.interval)
        self._last = now
        if self._balance < 1.0:
            time.sleep((1.0 - self._balance) * self.interval)
            self._balance, self._last = 1.0, time.monotonic()
        self._balance -= 1.0


def run(opts: ToNsqOptions, stream: BinaryIO | None = None) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sys.exit(0))
    settings = opts.producer
    addresses = dict.fromkeys(opts.nsqd_tcp_addresses)  # one producer per address, as Go's map of them
    producers = [Producer(addr, identify=settings.identify, tls_context=settings.tls_context(),
                          timeout=settings.timeout, user_agent=user_agent(APP)) for addr in addresses]
    throttle = Throttle(opts.rate)
    if opts.rate > 0:
        print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} Throttling messages rate to max:{opts.rate}/second",
              file=sys.stderr, flush=True)
    try:
        for record in records(stream or sys.stdin.buffer, opts.delimiter):
            throttle.wait()
            for producer in producers:
                try:
                    producer.pub(opts.topic, record)
                except NSQError as err:
                    log_fatal(go_dial_error(producer.address, err))
    finally:
        for producer in producers:
            producer.close()
