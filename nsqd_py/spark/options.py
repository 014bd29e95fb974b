"""The "nsq" format's options: Spark hands them over as a case-insensitive mapping of strings.

Parsed once into frozen dataclasses that pickle cheaply (no sockets, no SSL contexts), because the data source,
its readers and writers are pickled to the planner and executor processes. An option read on its own is declared
once, as a field made by `option(key, reader, default)`; `parse` reads those from the class and adds only what
depends on other options (aliases, derived defaults, checks across options).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from ..go.durations import MILLISECOND, parse_duration
from ..wire.names import is_valid_name

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


class OptionError(ValueError):
    """A missing or malformed option; raised while Spark plans the query, before anything connects."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(opts: dict[str, str], key: str, default: bool = False) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise OptionError(f"option {key!r} must be true or false, not {raw!r}")


def _int(opts: dict[str, str], key: str, default: int, minimum: int = 0) -> int:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {key!r} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {key!r} must be at least {minimum}, not {value}")
    return value


def _seconds(opts: dict[str, str], key: str, default: float | None) -> float | None:
    """A Go duration (`60s`, `1m30s`, `500ms`); a bare number means milliseconds, as in nsqd's IDENTIFY."""
    raw = opts.get(key.lower())
    if raw is None:
        return default
    text = raw.strip()
    try:
        ns = int(text) * MILLISECOND if text.isdigit() else parse_duration(text)
    except ValueError as err:
        raise OptionError(f"option {key!r}: {err}") from None
    if ns < 0:
        raise OptionError(f"option {key!r} must not be negative")
    return ns / 1e9


def _positive_seconds(opts: dict[str, str], key: str, default: float) -> float:
    """`_seconds`, with 0 meaning the default."""
    return _seconds(opts, key, default) or default


def _addresses(opts: dict[str, str], key: str, _default: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(a.strip() for a in opts.get(key, "").split(",") if a.strip())


def _text(opts: dict[str, str], key: str, default: str | None) -> str | None:
    """The option's text; empty means the default."""
    return opts.get(key.lower()) or default


def _optional_int(opts: dict[str, str], key: str, _default: None = None, minimum: int = 1) -> int | None:
    return _int(opts, key, 0, minimum) if key.lower() in opts else None


def _identify_ms(opts: dict[str, str], key: str, _default: None = None) -> int | None:
    """An IDENTIFY interval in milliseconds: a Go duration or milliseconds, or -1 to turn it off (nsqd's -1)."""
    if opts.get(key.lower(), "").strip() == "-1":
        return -1
    seconds = _seconds(opts, key, None)
    return None if seconds is None else round(seconds * 1000)


def _pattern(opts: dict[str, str], key: str, _default: None = None) -> str | None:
    """A regular expression, checked here so that a typo fails when Spark plans the query."""
    raw = opts.get(key.lower())
    if raw is None:
        return None
    try:
        re.compile(raw)
    except re.error as err:
        raise OptionError(f"option {key!r} is not a regular expression: {err}") from None
    if not raw:
        raise OptionError(f"option {key!r} must not be empty")
    return raw


def _starting_offsets(opts: dict[str, str], key: str, default: str) -> str:
    value = opts.get(key.lower(), default).strip().lower()
    if value not in ("earliest", "latest"):
        raise OptionError(f"option {key!r} must be earliest or latest, not {opts[key.lower()]!r}")
    return value


def _timestamp_ns(opts: dict[str, str], key: str, _default: None = None) -> int | None:
    """Epoch milliseconds (as Kafka's timestamp options) or ISO-8601 with its offset (`2026-01-31T12:00:00Z`)."""
    raw = opts.get(key.lower())
    if raw is None:
        return None
    text = raw.strip()
    if text.isdigit():
        return int(text) * 1_000_000
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise OptionError(f"option {key!r} must be epoch milliseconds or an ISO-8601 time, not {raw!r}") from None
    if moment.tzinfo is None:
        raise OptionError(f"option {key!r}: give the time's offset from UTC, as in {text}Z or {text}+02:00")
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


Reader = Callable[..., Any]


def option(key: str, read: Reader, default: Any = None, **limits: int) -> Any:
    """A field read from the option map by ``read(options, key, default, **limits)`` (Spark lower-cases keys)."""
    return field(default=default, metadata={"option": (key, read, limits)})


def _read_declared(cls: type, opts: dict[str, str]) -> dict[str, Any]:
    """Every field of ``cls`` declared with `option`, read from ``opts``."""
    values = {}
    for f in fields(cls):
        if "option" in f.metadata:
            key, read, limits = f.metadata["option"]
            values[f.name] = read(opts, key, f.default, **limits)
    return values


@dataclass(frozen=True)
class ConnectOptions:
    """How to reach nsqd: addresses or lookupd, TLS, compression, AUTH (shared by reading and writing)."""

    nsqd_tcp_addresses: tuple[str, ...] = option("nsqd_tcp_addresses", _addresses, ())
    #: each nsqd's HTTP address (for /stats), in the order of nsqd_tcp_addresses; by default the TCP port + 1
    nsqd_http_addresses: tuple[str, ...] = option("nsqd_http_addresses", _addresses, ())
    lookupd_http_addresses: tuple[str, ...] = option("lookupd_http_addresses", _addresses, ())
    connect_timeout: float = option("connect_timeout", _positive_seconds, 5.0)
    tls: bool = option("tls", _bool, False)
    tls_ca_file: str | None = option("tls_ca_file", _text)
    tls_cert_file: str | None = option("tls_cert_file", _text)
    tls_key_file: str | None = option("tls_key_file", _text)
    tls_insecure_skip_verify: bool = option("tls_insecure_skip_verify", _bool, False)
    tls_server_name: str | None = option("tls_server_name", _text)
    snappy: bool = option("snappy", _bool, False)
    deflate: bool = option("deflate", _bool, False)
    deflate_level: int = option("deflate_level", _int, 6, minimum=1)
    auth_secret: str | None = option("auth_secret", _text)
    msg_timeout: float | None = option("msg_timeout", _seconds)
    # -- IDENTIFY's settings, passed through so that operators see and tune the connections (nsqadmin, /stats) --
    client_id: str | None = option("client_id", _text)
    hostname: str | None = option("hostname", _text)
    #: milliseconds, -1 off; nsqd's default is half its --client-timeout (30s)
    heartbeat_interval: int | None = option("heartbeat_interval", _identify_ms)
    #: milliseconds, -1 off; nsqd's default is its --output-buffer-timeout (250ms)
    output_buffer_timeout: int | None = option("output_buffer_timeout", _identify_ms)
    #: percent of the channel's messages nsqd delivers on this connection (0: all)
    sample_rate: int | None = option("sample_rate", _optional_int, minimum=0)

    @classmethod
    def parse(cls, opts: dict[str, str]) -> ConnectOptions:
        parsed = cls(**_read_declared(cls, opts))
        if bool(parsed.nsqd_tcp_addresses) == bool(parsed.lookupd_http_addresses):
            raise OptionError("set exactly one of 'nsqd_tcp_addresses' and 'lookupd_http_addresses'")
        if parsed.nsqd_http_addresses and len(parsed.nsqd_http_addresses) != len(parsed.nsqd_tcp_addresses):
            raise OptionError("'nsqd_http_addresses' must name one HTTP address per entry of 'nsqd_tcp_addresses'")
        if parsed.snappy and parsed.deflate:
            raise OptionError("'snappy' and 'deflate' cannot both be enabled")
        if parsed.msg_timeout is not None and parsed.msg_timeout < 1:
            raise OptionError("option 'msg_timeout' must be at least 1s (nsqd's minimum)")
        if parsed.sample_rate is not None and parsed.sample_rate > 99:
            raise OptionError(f"option 'sample_rate' must be 0-99 (percent), not {parsed.sample_rate}")
        return parsed

    def identify_fields(self) -> dict[str, object]:
        """What IDENTIFY asks nsqd for."""
        fields: dict[str, object] = {"tls_v1": self.tls, "snappy": self.snappy, "deflate": self.deflate}
        if self.deflate:
            fields["deflate_level"] = self.deflate_level
        if self.msg_timeout is not None:
            fields["msg_timeout"] = int(self.msg_timeout * 1000)
        passed = {"client_id": self.client_id, "hostname": self.hostname, "heartbeat_interval": self.heartbeat_interval,
                  "output_buffer_timeout": self.output_buffer_timeout, "sample_rate": self.sample_rate}
        fields.update({key: value for key, value in passed.items() if value is not None})
        return fields


def _topic(opts: dict[str, str]) -> str:
    topic = opts.get("topic", "")
    if not is_valid_name(topic):
        raise OptionError(f"option 'topic' must be a valid NSQ topic name, not {topic!r}")
    return topic


def _alias(opts: dict[str, str], name: str, *aliases: str) -> dict[str, str]:
    """Read Kafka's option name, or one of the names it replaced (both given is an error)."""
    given = [key for key in (name, *aliases) if key.lower() in opts]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(repr(k) for k in given)} mean the same: set one")
    if given and given[0] != name:
        return {**opts, name.lower(): opts[given[0].lower()]}
    return opts


def _topics(opts: dict[str, str]) -> tuple[str, ...]:
    """`subscribe` (a comma list, as Kafka's) or `topic`; none with `subscribePattern`."""
    opts = _alias(opts, "subscribe", "topic")
    topics = tuple(dict.fromkeys(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()))
    if ("subscribepattern" in opts) == bool(topics):
        raise OptionError("set exactly one of 'subscribe' (or 'topic') and 'subscribePattern': the topics to read")
    for topic in topics:
        if not is_valid_name(topic):
            raise OptionError(f"option 'subscribe' must list valid NSQ topic names, not {topic!r}")
    return topics


def _dead_letter_name(topic: str, given: str | None) -> str:
    """``given``, or `<topic>_dead_letter` when that is a valid topic name (not past 64 characters nor after
    `#ephemeral`)."""
    name = given or f"{topic}_dead_letter"
    if not is_valid_name(name):
        raise OptionError(f"the dead-letter topic of {topic!r} would be {name!r}, not a valid NSQ topic name: set "
                          f"option 'deadLetterTopic'")
    return name


#: where the executors read: their own subscriptions (replayable), or the driver's one (see docs/spark.md)
READ_MODES = ("executors", "driver")


@dataclass(frozen=True)
class ReadOptions:
    """A streaming read of one channel of one or more topics."""

    topics: tuple[str, ...]
    channel: str
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    read_mode: str = "executors"
    #: a regular expression over the topics lookupd (or each nsqd) knows, instead of `topics`; asked each trigger
    subscribe_pattern: str | None = option("subscribePattern", _pattern)
    #: a new query (no checkpoint) reads the channel as it is (earliest), or empties it first (latest)
    starting_offsets: str = option("startingOffsets", _starting_offsets, "earliest")
    #: with trigger(availableNow=True): read what was published up to here (ns since the epoch), at most to the start
    ending_timestamp_ns: int | None = option("endingTimestamp", _timestamp_ns)
    #: rows per micro-batch (Kafka's maxOffsetsPerTrigger); None reads what the channels hold
    max_offsets_per_trigger: int | None = option("maxOffsetsPerTrigger", _optional_int)
    #: fewer rows than this wait for more, up to max_trigger_delay after the last batch
    min_offsets_per_trigger: int | None = option("minOffsetsPerTrigger", _optional_int)
    max_trigger_delay: float = option("maxTriggerDelay", _seconds, 15 * 60.0)
    max_bytes_per_trigger: int | None = option("maxBytesPerTrigger", _optional_int)
    #: partitions per micro-batch (spread over the nsqd nodes by their share); None: the driver's cores
    min_partitions: int | None = option("minPartitions", _optional_int)
    #: an nsqd or lookupd that cannot be reached fails the query (true), or is skipped until it answers (false)
    fail_on_unreachable: bool = option("failOnUnreachable", _bool, False)
    #: a task ends its slice when no message came for this long
    poll_timeout: float = option("pollTimeout", _positive_seconds, 0.5)
    #: messages delivered more often than this are suspects, tried apart; one a task died holding alone goes to
    #: dead_letter_topic (trials.py; 0: no limit)
    max_attempts: int = option("maxAttempts", _int, 0)
    dead_letter_topic: str | None = None
    #: where executors publish the slices they read (a path or file://, hdfs://, s3:// URI; relative to the
    #: driver's working directory)
    write_ahead_location: str = option("writeAheadLocation", _text, "nsq-write-ahead")
    #: committed batches whose slices stay in the write-ahead location (late attempts find their batch committed)
    min_batches_to_retain: int = option("minBatchesToRetain", _int, 10, minimum=1)
    #: a batch Spark runs again whose slices are gone fails the query (true) or is read afresh (false)
    fail_on_data_loss: bool = option("failOnDataLoss", _bool, True)
    # -- readMode=driver only ---------------------------------------------------------------------------------------
    max_messages_per_batch: int = 50000
    #: RDY over all connections: what the reader holds unsettled. Three batches by default: the previous batch stays
    #: in flight until Spark commits it (when it plans the next one), the planned one runs, the next one fills
    max_in_flight: int = 150000
    #: message bytes the reader holds unsettled before it pauses (RDY 0) until a commit settles some
    max_in_flight_bytes: int = option("max_in_flight_bytes", _int, 256 * 1024 * 1024, minimum=1)
    num_partitions: int = 2
    # -- both -------------------------------------------------------------------------------------------------------
    #: with trigger(availableNow=True): the query ends after this long without an admissible message
    idle_timeout: float = option("idle_timeout", _seconds, 2.0)
    lookupd_poll_interval: float = option("lookupd_poll_interval", _positive_seconds, 60.0)

    @property
    def topic(self) -> str:
        """The one topic of a driver-mode read."""
        return self.topics[0]

    def dead_letter_for(self, topic: str) -> str:
        return _dead_letter_name(topic, self.dead_letter_topic)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        opts = _lower(options)
        channel = opts.get("channel", "")
        if not is_valid_name(channel):
            raise OptionError(f"option 'channel' must be a valid NSQ channel name, not {channel!r}")
        if channel.endswith("#ephemeral"):
            raise OptionError(f"option 'channel': {channel!r} is ephemeral: nsqd deletes such a channel whenever "
                              f"a batch's tasks disconnect, dropping what is published between batches")
        mode = opts.get("readmode", "executors").strip().lower()
        if mode not in READ_MODES:
            raise OptionError(f"option 'readMode' must be one of {', '.join(READ_MODES)}, not {mode!r}")
        topics = _topics(opts)
        if mode == "driver" and len(topics) != 1:
            raise OptionError("readMode=driver reads one topic (no 'subscribePattern'): give each topic its own query")
        dead_letter = opts.get("deadlettertopic") or None
        if dead_letter is not None and not is_valid_name(dead_letter):
            raise OptionError(f"option 'deadLetterTopic' must be a valid NSQ topic name, not {dead_letter!r}")
        opts = _alias(_alias(opts, "maxOffsetsPerTrigger", "max_messages_per_batch"), "minPartitions",
                      "num_partitions")
        connect = ConnectOptions.parse(opts)
        declared = _read_declared(cls, opts)
        if declared["max_attempts"]:  # topics found by subscribePattern are checked when their tasks start
            for topic in topics:
                _dead_letter_name(topic, dead_letter)
        batch = declared["max_offsets_per_trigger"] or cls.max_messages_per_batch
        return cls(topics=topics, channel=channel, connect=connect, read_mode=mode, dead_letter_topic=dead_letter,
                   max_messages_per_batch=batch, max_in_flight=_int(opts, "max_in_flight", 3 * batch, minimum=1),
                   num_partitions=declared["min_partitions"] or cls.num_partitions, **declared)


@dataclass(frozen=True)
class WriteOptions:
    """Publishing a DataFrame's `value` or `body` column, to the topic in its `topic` column or this ``topic``."""

    #: for rows whose `topic` column is null, or DataFrames without one; the writer requires one of the two
    topic: str | None = None
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    mpub_max_messages: int = option("mpub_max_messages", _int, 500, minimum=1)
    mpub_max_bytes: int = option("mpub_max_bytes", _int, 1024 * 1024, minimum=1)
    #: MPUBs sent ahead of nsqd's answers (1: wait for each OK)
    mpub_window: int = option("mpub_window", _int, 4, minimum=1)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        opts = _lower(options)
        return cls(topic=_topic(opts) if "topic" in opts else None, connect=ConnectOptions.parse(opts),
                   **_read_declared(cls, opts))
