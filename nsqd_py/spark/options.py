"""The "nsq" format's options: Spark hands them over as a case-insensitive mapping of strings.

Parsed once into frozen dataclasses that pickle cheaply (no sockets, no SSL contexts), because the data source,
its readers and writers are pickled to the planner and executor processes. An option read on its own is declared
once, as a field made by `option(key, reader, default)`; `parse` reads those from the class and adds only what
depends on other options (aliases, derived defaults, checks across options).

Names are camelCase, as Kafka's source names its options (`maxOffsetsPerTrigger`, `failOnDataLoss`); each one is
also accepted in snake_case (`max_offsets_per_trigger`, `nsqd_tcp_addresses`, the style of earlier versions), since
users coming from Python clients write that. Both spellings reduce to one key (`canonical`).
"""

from __future__ import annotations

import json
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


def canonical(key: str) -> str:
    """The key an option is looked up by: neither case (Spark lower-cases keys) nor underscores count, so
    `maxOffsetsPerTrigger` and `max_offsets_per_trigger` are one option."""
    return str(key).lower().replace("_", "")


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """The options by `canonical` key. Two spellings of one option with different values are an error: neither
    can be the one the user meant (the values stay out of the message: one may be `authSecret`)."""
    opts: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for key, value in options.items():
        name = canonical(key)
        if name in opts and opts[name] != str(value):
            raise OptionError(f"options {spelled[name]!r} and {key!r} are the same option with different values: "
                              f"set one")
        opts[name], spelled[name] = str(value), str(key)
    return opts


def _bool(opts: dict[str, str], key: str, default: bool = False) -> bool:
    raw = opts.get(canonical(key))
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise OptionError(f"option {key!r} must be true or false, not {raw!r}")


def _int(opts: dict[str, str], key: str, default: int, minimum: int = 0) -> int:
    raw = opts.get(canonical(key))
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
    raw = opts.get(canonical(key))
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
    return tuple(a.strip() for a in opts.get(canonical(key), "").split(",") if a.strip())


def _text(opts: dict[str, str], key: str, default: str | None) -> str | None:
    """The option's text; empty means the default."""
    return opts.get(canonical(key)) or default


def _optional_int(opts: dict[str, str], key: str, _default: None = None, minimum: int = 1) -> int | None:
    return _int(opts, key, 0, minimum) if canonical(key) in opts else None


def _identify_ms(opts: dict[str, str], key: str, _default: None = None) -> int | None:
    """An IDENTIFY interval in milliseconds: a Go duration or milliseconds, or -1 to turn it off (nsqd's -1)."""
    if opts.get(canonical(key), "").strip() == "-1":
        return -1
    seconds = _seconds(opts, key, None)
    return None if seconds is None else round(seconds * 1000)


def _pattern(opts: dict[str, str], key: str, _default: None = None) -> str | None:
    """A regular expression, checked here so that a typo fails when Spark plans the query."""
    raw = opts.get(canonical(key))
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
    value = opts.get(canonical(key), default).strip().lower()
    if value not in ("earliest", "latest"):
        raise OptionError(f"option {key!r} must be earliest or latest, not {opts[canonical(key)]!r}")
    return value


def _timestamp_ns(opts: dict[str, str], key: str, _default: None = None) -> int | None:
    """Epoch milliseconds (as Kafka's timestamp options) or ISO-8601 with its offset (`2026-01-31T12:00:00Z`)."""
    raw = opts.get(canonical(key))
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


_BY_TOPIC = '{"clicks": 1700000000000}'


def _timestamps_by_topic(opts: dict[str, str], key: str, _default: None = None) -> tuple[tuple[str, int], ...] | None:
    """Kafka's startingOffsetsByTimestamp, one time per topic (a topic's partitions are its nsqd, which share it):
    `{"topicA": 1700000000000, "topicB": "2026-01-31T12:00:00Z"}`, each as `startingTimestamp` takes it; in ns."""
    raw = opts.get(canonical(key))
    if raw is None:
        return None
    try:
        given = json.loads(raw)
    except ValueError as err:
        raise OptionError(f"option {key!r} must be a JSON object of topic to time, as in {_BY_TOPIC}: {err}") from None
    if not isinstance(given, dict) or not given:
        raise OptionError(f"option {key!r} must be a JSON object of topic to time, as in {_BY_TOPIC}")
    times = []
    for topic, value in given.items():
        if not is_valid_name(str(topic)) or isinstance(value, bool | dict | list) or value is None:
            raise OptionError(f"option {key!r}: {topic!r}: give one time per topic (epoch milliseconds or ISO-8601), "
                              f"not {value!r}")
        try:
            at = _timestamp_ns({"t": str(value)}, "t")
        except OptionError:
            raise OptionError(f"option {key!r}: the time of {topic!r} must be epoch milliseconds or an ISO-8601 time "
                              f"with its offset, not {value!r}") from None
        assert at is not None
        times.append((str(topic), at))
    return tuple(sorted(times))


Reader = Callable[..., Any]


def option(key: str, read: Reader, default: Any = None, **limits: int) -> Any:
    """A field read from the `normalize`d option map by ``read(options, key, default, **limits)``; ``key`` is the
    option's camelCase name, as documented and as its error messages give it."""
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

    nsqd_tcp_addresses: tuple[str, ...] = option("nsqdTcpAddresses", _addresses, ())
    #: each nsqd's HTTP address (for /stats), in the order of nsqdTcpAddresses; by default the TCP port + 1
    nsqd_http_addresses: tuple[str, ...] = option("nsqdHttpAddresses", _addresses, ())
    lookupd_http_addresses: tuple[str, ...] = option("lookupdHttpAddresses", _addresses, ())
    connect_timeout: float = option("connectTimeout", _positive_seconds, 5.0)
    tls: bool = option("tls", _bool, False)
    tls_ca_file: str | None = option("tlsCaFile", _text)
    tls_cert_file: str | None = option("tlsCertFile", _text)
    tls_key_file: str | None = option("tlsKeyFile", _text)
    tls_insecure_skip_verify: bool = option("tlsInsecureSkipVerify", _bool, False)
    tls_server_name: str | None = option("tlsServerName", _text)
    snappy: bool = option("snappy", _bool, False)
    deflate: bool = option("deflate", _bool, False)
    deflate_level: int = option("deflateLevel", _int, 6, minimum=1)
    auth_secret: str | None = option("authSecret", _text)
    msg_timeout: float | None = option("msgTimeout", _seconds)
    # -- IDENTIFY's settings, passed through so that operators see and tune the connections (nsqadmin, /stats) --
    client_id: str | None = option("clientId", _text)
    hostname: str | None = option("hostname", _text)
    #: milliseconds, -1 off; nsqd's default is half its --client-timeout (30s)
    heartbeat_interval: int | None = option("heartbeatInterval", _identify_ms)
    #: milliseconds, -1 off; nsqd's default is its --output-buffer-timeout (250ms)
    output_buffer_timeout: int | None = option("outputBufferTimeout", _identify_ms)
    #: percent of the channel's messages nsqd delivers on this connection (0: all)
    sample_rate: int | None = option("sampleRate", _optional_int, minimum=0)

    @classmethod
    def parse(cls, opts: dict[str, str]) -> ConnectOptions:
        parsed = cls(**_read_declared(cls, opts))
        if bool(parsed.nsqd_tcp_addresses) == bool(parsed.lookupd_http_addresses):
            raise OptionError("set exactly one of 'nsqdTcpAddresses' and 'lookupdHttpAddresses'")
        if parsed.nsqd_http_addresses and len(parsed.nsqd_http_addresses) != len(parsed.nsqd_tcp_addresses):
            raise OptionError("'nsqdHttpAddresses' must name one HTTP address per entry of 'nsqdTcpAddresses'")
        if parsed.snappy and parsed.deflate:
            raise OptionError("'snappy' and 'deflate' cannot both be enabled")
        if parsed.msg_timeout is not None and parsed.msg_timeout < 1:
            raise OptionError("option 'msgTimeout' must be at least 1s (nsqd's minimum)")
        if parsed.sample_rate is not None and parsed.sample_rate > 99:
            raise OptionError(f"option 'sampleRate' must be 0-99 (percent), not {parsed.sample_rate}")
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
    """Read option ``name`` under the names it replaced too; given under several with different values is an
    error, as for two spellings of one name (`normalize`)."""
    given = {key: opts[canonical(key)] for key in (name, *aliases) if canonical(key) in opts}
    if len(set(given.values())) > 1:
        raise OptionError(f"options {' and '.join(repr(k) for k in given)} are the same option with different "
                          f"values: set one")
    if given:
        return {**opts, canonical(name): next(iter(given.values()))}
    return opts


def _topics(opts: dict[str, str]) -> tuple[str, ...]:
    """`subscribe` (a comma list, as Kafka's) or `topic`; none with `subscribePattern`."""
    opts = _alias(opts, "subscribe", "topic")
    topics = tuple(dict.fromkeys(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()))
    if (canonical("subscribePattern") in opts) == bool(topics):
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
    #: a new query (no checkpoint) reads the channel as it is (earliest), or empties it first (latest); on a
    #: retained topic whose channel is new, earliest replays the retained log (history.py)
    starting_offsets: str = option("startingOffsets", _starting_offsets, "earliest")
    #: Kafka's startingTimestamp: a new channel of a retained topic replays from this time (ns since the epoch); takes
    #: precedence over the two others, as in Kafka
    starting_timestamp_ns: int | None = option("startingTimestamp", _timestamp_ns)
    #: Kafka's startingOffsetsByTimestamp, by topic: takes precedence over startingOffsets
    starting_offsets_by_timestamp: tuple[tuple[str, int], ...] | None = option("startingOffsetsByTimestamp",
                                                                               _timestamps_by_topic)
    #: with trigger(availableNow=True): read what was published up to here (ns since the epoch), at most to the start
    ending_timestamp_ns: int | None = option("endingTimestamp", _timestamp_ns)
    #: rows per micro-batch (Kafka's maxOffsetsPerTrigger); None reads what the channels hold
    max_offsets_per_trigger: int | None = option("maxOffsetsPerTrigger", _optional_int)
    #: fewer rows than this wait for more, up to max_trigger_delay after the last batch
    min_offsets_per_trigger: int | None = option("minOffsetsPerTrigger", _optional_int)
    max_trigger_delay: float = option("maxTriggerDelay", _seconds, 15 * 60.0)
    max_bytes_per_trigger: int | None = option("maxBytesPerTrigger", _optional_int)
    #: body bytes nsqd may have sent a task that it has not FINed yet (Kafka's fetch.max.bytes, 50 MiB): RDY is
    #: this over the largest recent body, at least 1
    fetch_max_bytes: int = option("fetchMaxBytes", _int, 50 * 1024 * 1024, minimum=1)
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
    max_in_flight_bytes: int = option("maxInFlightBytes", _int, 256 * 1024 * 1024, minimum=1)
    num_partitions: int = 2
    # -- both -------------------------------------------------------------------------------------------------------
    #: with trigger(availableNow=True): the query ends after this long without an admissible message
    idle_timeout: float = option("idleTimeout", _seconds, 2.0)
    lookupd_poll_interval: float = option("lookupdPollInterval", _positive_seconds, 60.0)

    @property
    def topic(self) -> str:
        """The one topic of a driver-mode read."""
        return self.topics[0]

    @property
    def starts_at_time(self) -> bool:
        """A start time was given (startingTimestamp or startingOffsetsByTimestamp)."""
        return self.starting_timestamp_ns is not None or self.starting_offsets_by_timestamp is not None

    def start_of(self, topic: str) -> str | int | None:
        """Where a new channel of ``topic`` starts: "earliest", "latest", a time in ns, or None: a topic that
        startingOffsetsByTimestamp does not name (found by subscribePattern)."""
        if self.starting_timestamp_ns is not None:
            return self.starting_timestamp_ns
        if self.starting_offsets_by_timestamp is not None:
            return dict(self.starting_offsets_by_timestamp).get(topic)
        return self.starting_offsets

    def describe_start(self) -> str:
        """The start options as given (for the start record and the logs)."""
        if self.starting_timestamp_ns is not None:
            return f"startingTimestamp={self.starting_timestamp_ns // 1_000_000}"
        if self.starting_offsets_by_timestamp is not None:
            times = {topic: at // 1_000_000 for topic, at in self.starting_offsets_by_timestamp}
            return f"startingOffsetsByTimestamp={json.dumps(times)}"
        return self.starting_offsets

    def dead_letter_for(self, topic: str) -> str:
        return _dead_letter_name(topic, self.dead_letter_topic)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        opts = normalize(options)
        channel = opts.get("channel", "")
        if not is_valid_name(channel):
            raise OptionError(f"option 'channel' must be a valid NSQ channel name, not {channel!r}")
        if channel.endswith("#ephemeral"):
            raise OptionError(f"option 'channel': {channel!r} is ephemeral: nsqd deletes such a channel whenever "
                              f"a batch's tasks disconnect, dropping what is published between batches")
        mode = opts.get(canonical("readMode"), "executors").strip().lower()
        if mode not in READ_MODES:
            raise OptionError(f"option 'readMode' must be one of {', '.join(READ_MODES)}, not {mode!r}")
        topics = _topics(opts)
        if mode == "driver" and len(topics) != 1:
            raise OptionError("readMode=driver reads one topic (no 'subscribePattern'): give each topic its own query")
        dead_letter = opts.get(canonical("deadLetterTopic")) or None
        if dead_letter is not None and not is_valid_name(dead_letter):
            raise OptionError(f"option 'deadLetterTopic' must be a valid NSQ topic name, not {dead_letter!r}")
        opts = _alias(_alias(opts, "maxOffsetsPerTrigger", "max_messages_per_batch"), "minPartitions",
                      "num_partitions")
        connect = ConnectOptions.parse(opts)
        declared = _read_declared(cls, opts)
        if declared["max_attempts"]:  # topics found by subscribePattern are checked when their tasks start
            for topic in topics:
                _dead_letter_name(topic, dead_letter)
        by_topic = declared["starting_offsets_by_timestamp"]
        if by_topic is not None and topics:
            missing = sorted(set(topics) - {topic for topic, _ in by_topic})
            if missing:  # as Kafka's: every subscribed partition needs its time
                raise OptionError(f"option 'startingOffsetsByTimestamp' gives no time for topic(s) "
                                  f"{', '.join(missing)}: give one for every subscribed topic")
        if mode == "driver" and (declared["starting_timestamp_ns"] is not None or by_topic is not None):
            raise OptionError("readMode=driver reads the channel as it is: 'startingTimestamp' and "
                              "'startingOffsetsByTimestamp' need readMode=executors")
        batch = declared["max_offsets_per_trigger"] or cls.max_messages_per_batch
        return cls(topics=topics, channel=channel, connect=connect, read_mode=mode, dead_letter_topic=dead_letter,
                   max_messages_per_batch=batch, max_in_flight=_int(opts, "maxInFlight", 3 * batch, minimum=1),
                   num_partitions=declared["min_partitions"] or cls.num_partitions, **declared)


@dataclass(frozen=True)
class WriteOptions:
    """Publishing a DataFrame's `value` or `body` column, to the topic in its `topic` column or this ``topic``."""

    #: for rows whose `topic` column is null, or DataFrames without one; the writer requires one of the two
    topic: str | None = None
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    mpub_max_messages: int = option("mpubMaxMessages", _int, 500, minimum=1)
    mpub_max_bytes: int = option("mpubMaxBytes", _int, 1024 * 1024, minimum=1)
    #: MPUBs sent ahead of nsqd's answers (1: wait for each OK)
    mpub_window: int = option("mpubWindow", _int, 4, minimum=1)
    #: how long an MPUB may wait for nsqd's answer (a disk stall, a paused VM) before the task fails; as Kafka's
    #: request.timeout.ms (30s). An unanswered MPUB may have been stored, so it is never sent again
    request_timeout: float = option("requestTimeout", _positive_seconds, 30.0)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        opts = normalize(options)
        return cls(topic=_topic(opts) if "topic" in opts else None, connect=ConnectOptions.parse(opts),
                   **_read_declared(cls, opts))
