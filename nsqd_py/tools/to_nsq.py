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
from dataclasses import dataclass
from typing import BinaryIO

from ..client import NSQError, Producer
from ..go.goflags import FlagSet
from .common import ClientSettings, client_settings, go_dial_error, log_fatal, user_agent

APP = "to_nsq"


def flag_set() -> FlagSet:
    fs = FlagSet(APP)
    fs.add("topic", "string", "", "NSQ topic to publish to")
    fs.add("delimiter", "string", "\n", "character to split input from stdin")
    fs.add("nsqd-tcp-address", "list", [], "destination nsqd TCP address (may be given multiple times)")
    fs.add("producer-opt", "list", [],
           "option to passthrough to nsq.Producer (may be given multiple times, "
           "http://godoc.org/github.com/nsqio/go-nsq#Config)")
    fs.add("rate", "int", 0, "Throttle messages to n/second. 0 to disable")
    return fs


@dataclass
class Options:
    topic: str
    delimiter: bytes
    nsqd_tcp_addresses: list[str]
    producer: ClientSettings
    rate: int


def parse_options(argv: Sequence[str]) -> Options:
    v = flag_set().parse(argv).values
    try:
        producer = client_settings(v["producer-opt"])
    except ValueError as err:
        log_fatal(f"invalid --producer-opt - {err}")
    if not v["topic"]:
        log_fatal("--topic required")
    delimiter = v["delimiter"].encode("utf-8", "surrogateescape")
    if len(delimiter) != 1:
        log_fatal("--delimiter must be a single byte")
    if not v["nsqd-tcp-address"]:
        log_fatal("--nsqd-tcp-address required")
    return Options(v["topic"], delimiter, v["nsqd-tcp-address"], producer, v["rate"])


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


def run(opts: Options, stream: BinaryIO | None = None) -> None:
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
