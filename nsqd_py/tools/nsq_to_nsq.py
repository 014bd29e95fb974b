"""nsq_to_nsq: copy topics to other nsqd, as NSQ's Go tool, optionally filtering and trimming JSON messages.

A message is FINed only after a destination nsqd answered OK to the MPUB that carried it (relay.py; Go publishes
one by one, batches measured ~10x faster here); a message the JSON filters reject is FINed without being
published, as Go's handler does. `--mode=hostpool` (default) prefers destinations that did
not fail lately, `round-robin` takes each in turn.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client import Message, NSQError, Producer
from ..go.settings import INT, LIST, STRING, setting
from .common import (
    PRODUCER_OPT_USAGE,
    ClientSettings,
    SourceOptions,
    log_fatal,
    log_printf,
    parse_tool_flags,
    printed_version,
    read_client_settings,
    user_agent,
)
from .relay import MODE_USAGE, TimerMetrics, check_mode, host_selector, make_consumers, relay

APP = "nsq_to_nsq"
#: messages per MPUB to a destination
_BATCH = 100


@dataclass
class NsqToNsqOptions(SourceOptions):
    channel: str = setting("channel", STRING, "nsq_to_nsq", "nsq channel")
    destination_topic: str = setting("destination-topic", STRING, "",
                                     "use this destination topic for all consumed topics (default is consumed topic "
                                     "name)")
    status_every: int = setting("status-every", INT, 250,
                                "the # of requests between logging status (per destination), 0 disables")
    mode: str = setting("mode", STRING, "hostpool", MODE_USAGE)
    destinations: list[str] = setting("destination-nsqd-tcp-address", LIST, [],
                                      "destination nsqd TCP address (may be given multiple times)")
    whitelist: list[str] = setting("whitelist-json-field", LIST, [],
                                   "for JSON messages: pass this field (may be given multiple times)")
    require_field: str = setting("require-json-field", STRING, "",
                                 "for JSON messages: only pass messages that contain this field")
    require_value: str = setting("require-json-value", STRING, "",
                                 "for JSON messages: only pass messages in which the required field has this value")
    producer_opts: list[str] = setting("producer-opt", LIST, [], PRODUCER_OPT_USAGE)
    #: the parsed `producer_opts`
    producer: ClientSettings = field(default_factory=ClientSettings)


def parse_options(argv: Sequence[str]) -> NsqToNsqOptions | None:
    opts = parse_tool_flags(NsqToNsqOptions, APP, argv)
    opts.consumer = read_client_settings(opts.consumer_opts, "invalid option")
    opts.producer = read_client_settings(opts.producer_opts, "invalid option")
    if printed_version(opts.version, APP):
        return None
    if not opts.topics:
        log_fatal("--topic is required")
    if not opts.channel:
        log_fatal("--channel is required")
    opts.check_one_source()
    if not opts.destinations:
        log_fatal("--destination-nsqd-tcp-address required")
    check_mode(opts.mode)
    if opts.require_value and not opts.require_field:
        log_fatal("--require-json-value requires --require-json-field")
    opts.destinations = list(dict.fromkeys(opts.destinations))
    return opts


class JSONFilter:
    """`--require-json-field/value` and `--whitelist-json-field` (dotted names reach into nested objects)."""

    def __init__(self, require_field: str, require_value: str, whitelist: list[str]) -> None:
        self.require_field = require_field
        self.require_value = require_value
        self.whitelist = whitelist

    @property
    def active(self) -> bool:
        return bool(self.require_field or self.whitelist)

    def apply(self, body: bytes) -> bytes | None:
        """The body to publish, or None when the message is filtered out."""
        try:
            doc = json.loads(body)
        except ValueError:
            log_printf(f"ERROR: Unable to decode json: {body.decode('utf-8', 'replace')}")
            return None
        if not isinstance(doc, dict):
            return None
        if self.require_field:
            found, value = _lookup(doc, self.require_field)
            if not found or (self.require_value and not _equal(value, self.require_value)):
                return None
        if self.whitelist:
            kept: dict[str, Any] = {}
            for name in self.whitelist:
                found, value = _lookup(doc, name)
                if found:
                    _store(kept, name, value)
            return json.dumps(kept, separators=(",", ":")).encode()
        return body


def _lookup(doc: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    value: Any = doc
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _store(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        doc = doc.setdefault(part, {})
    doc[last] = value


def _equal(value: Any, wanted: str) -> bool:
    """A string field compares as text, a number as a number (Go compares `json.Number`s and strings)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value) == wanted
    if isinstance(value, int | float):
        try:
            return float(wanted) == float(value)
        except ValueError:
            return False
    return isinstance(value, str) and value == wanted


class NSQPublisher:
    """Publishes one message to a destination chosen by the mode; True once that nsqd answered OK."""

    def __init__(self, opts: NsqToNsqOptions) -> None:
        self.opts = opts
        self.filter = JSONFilter(opts.require_field, opts.require_value, opts.whitelist)
        settings = opts.producer
        self.producers = {addr: Producer(addr, identify=settings.identify, tls_context=settings.tls_context(),
                                         timeout=settings.timeout, user_agent=user_agent(APP))
                          for addr in opts.destinations}
        self.hosts = host_selector(opts.mode, opts.destinations)
        self._lock = threading.Lock()
        self.aggregate = TimerMetrics(opts.status_every, "[aggregate]:")

    def __call__(self, topic: str, msgs: list[Message]) -> bool:
        """One MPUB of the messages that pass the filters (a filtered-out message is simply done with)."""
        bodies = [self.filter.apply(m.body) for m in msgs] if self.filter.active else [m.body for m in msgs]
        kept = [body for body in bodies if body is not None]
        if not kept:
            return True
        with self._lock:
            addr = self.hosts.get()
        started = time.monotonic()
        try:
            self.producers[addr].mpub(self.opts.destination_topic or topic, kept)
            ok = True
        except NSQError as err:
            log_printf(f"ERROR: publishing to {addr} - {err}")
            ok = False
        with self._lock:
            self.hosts.mark(addr, ok)
            if ok:
                for _ in kept:
                    self.aggregate.status(started)
        return ok

    def close(self) -> None:
        for producer in self.producers.values():
            producer.close()


def run(opts: NsqToNsqOptions) -> None:
    consumers = make_consumers(APP, opts.topics, opts.channel, opts.nsqd_tcp_addresses, opts.lookupd_http_addresses,
                               opts.max_in_flight, opts.consumer)
    publisher = NSQPublisher(opts)
    try:
        # an MPUB per poll's worth of messages; a Producer holds one connection, so a few workers per destination
        relay(consumers, publisher, opts.consumer, workers=len(opts.destinations) * 2, batch=_BATCH)
    finally:
        publisher.close()
