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
from ..go.settings import BOOL, INT, LIST, STRING, setting
from .common import (
    SourceOptions,
    gonsq_log,
    log_fatal,
    log_printf,
    parse_tool_flags,
    printed_version,
    read_client_settings,
    user_agent,
)

APP = "nsq_tail"
#: how long a stopping nsq_tail waits for CLOSE_WAIT and its last in-flight messages
_STOP_TIMEOUT = 5.0


@dataclass
class TailOptions(SourceOptions):
    topics: list[str] = setting("topic", LIST, [], "NSQ topic (may be given multiple times)")
    channel: str = setting("channel", STRING, "", "NSQ channel")
    total: int = setting("n", INT, 0, "total messages to show (will wait if starved)")
    print_topic: bool = setting("print-topic", BOOL, False, "print topic name where message was received")


def parse_options(argv: Sequence[str]) -> TailOptions | None:
    opts = parse_tool_flags(TailOptions, APP, argv)
    opts.consumer = read_client_settings(opts.consumer_opts, "invalid --consumer-opt")
    if printed_version(opts.version, APP):
        return None
    opts.channel = opts.channel or f"tail{random.randrange(999999):06d}#ephemeral"
    opts.check_one_source()
    if not opts.topics:
        log_fatal("--topic required")
    opts.max_in_flight = opts.consumer.max_in_flight or opts.max_in_flight
    if 0 < opts.total < opts.max_in_flight:  # don't ask for more messages than we want
        opts.max_in_flight = opts.total
    return opts


def run(opts: TailOptions) -> None:
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


def _show(opts: TailOptions, topic: str, msg: Message) -> None:
    line = (f"{topic} | ".encode() if opts.print_topic else b"") + msg.body + b"\n"
    try:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    except OSError as err:
        log_fatal(f"ERROR: failed to write to os.Stdout - {err}")
