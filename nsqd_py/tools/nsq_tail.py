"""nsq_tail: print a topic's messages to stdout, one per line (as NSQ's Go tool).

Without --channel it subscribes an ephemeral `tailNNNNNN#ephemeral` channel. `-n` stops after that many
messages of one topic; --print-topic prefixes each line with `<topic> | `. SIGINT/SIGTERM: CLS, then exit.
"""

from __future__ import annotations

import random
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..client import Consumer, Message
from ..go.goflags import FlagSet
from ..runtime.version import version_line
from .common import (
    ClientSettings,
    add_source_flags,
    client_settings,
    gonsq_log,
    log_fatal,
    log_printf,
    one_source,
    user_agent,
)

APP = "nsq_tail"
#: how long a stopping nsq_tail waits for CLOSE_WAIT and its last in-flight messages
_STOP_TIMEOUT = 5.0


def flag_set() -> FlagSet:
    fs = FlagSet(APP)
    fs.add("version", "bool", False, "print version string")
    fs.add("channel", "string", "", "NSQ channel")
    fs.add("max-in-flight", "int", 200, "max number of messages to allow in flight")
    fs.add("n", "int", 0, "total messages to show (will wait if starved)")
    fs.add("print-topic", "bool", False, "print topic name where message was received")
    add_source_flags(fs, "NSQ topic (may be given multiple times)")
    return fs


@dataclass
class Options:
    topics: list[str]
    channel: str
    max_in_flight: int
    total: int
    print_topic: bool
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    consumer: ClientSettings


def parse_options(argv: Sequence[str]) -> Options | None:
    v = flag_set().parse(argv).values
    try:
        consumer = client_settings(v["consumer-opt"])
    except ValueError as err:
        log_fatal(f"invalid --consumer-opt - {err}")
    if v["version"]:
        print(version_line(APP))
        return None
    channel = v["channel"] or f"tail{random.randrange(999999):06d}#ephemeral"
    nsqds, lookupds = one_source(v)
    if not v["topic"]:
        log_fatal("--topic required")
    max_in_flight = consumer.max_in_flight or v["max-in-flight"]
    if 0 < v["n"] < max_in_flight:  # don't ask for more messages than we want
        max_in_flight = v["n"]
    return Options(v["topic"], channel, max_in_flight, v["n"], v["print-topic"], nsqds, lookupds, consumer)


def run(opts: Options) -> None:
    stop_requested: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop_requested.append(signum))
    consumers: list[Consumer] = []
    for i, topic in enumerate(opts.topics, 1):
        log_printf(f"Adding consumer for topic: {topic}")  # stderr, as Go's log: stdout carries only messages
        consumers.append(Consumer(
            topic, opts.channel, nsqd_tcp_addresses=opts.nsqd_tcp_addresses,
            lookupd_http_addresses=opts.lookupd_http_addresses, max_in_flight=opts.max_in_flight,
            identify=opts.consumer.identify, tls_context=opts.consumer.tls_context(), timeout=opts.consumer.timeout,
            lookupd_poll_interval=opts.consumer.lookupd_poll_interval, user_agent=user_agent(APP), log=gonsq_log(i),
        ))
    shown = dict.fromkeys(opts.topics, 0)
    deadline = float("inf")
    try:
        while time.monotonic() < deadline:
            if stop_requested and deadline == float("inf"):
                deadline = time.monotonic() + _STOP_TIMEOUT
                for consumer in consumers:
                    consumer.stop()
            if stop_requested and all(c.drained for c in consumers):
                return
            for consumer in consumers:
                for msg in consumer.poll(0.5 / len(consumers)):
                    _show(opts, consumer.topic, msg)
                    consumer.fin(msg)
                    shown[consumer.topic] += 1
                    if opts.total > 0 and shown[consumer.topic] >= opts.total:
                        return
    finally:
        for consumer in consumers:
            consumer.close()


def _show(opts: Options, topic: str, msg: Message) -> None:
    line = (f"{topic} | ".encode() if opts.print_topic else b"") + msg.body + b"\n"
    try:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    except OSError as err:
        log_fatal(f"ERROR: failed to write to os.Stdout - {err}")
