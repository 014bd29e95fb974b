"""The controls beyond nsqd 1.3.0 that a topic or a channel can set: each one defined here, once.

A `QueueSetting` is one control. Its key is the same everywhere: the TOML key and, with `-` for `_`, the flag
of its process-wide default (an `Options` field of that name); the query parameter of `POST /topic/settings`
and `POST /channel/settings`; the key under `"settings"` in nsqd.dat and in `/stats`. This module parses and
validates a value from each of those places, writes it back for nsqd.dat and `/stats`, and resolves which value
is in force: a channel's own, else its topic's, else the process default. What a control *does* lives with the
queue it acts on (core/channel.py); what it costs per message is one attribute read there.

Nothing set anywhere means no `"settings"` key in nsqd.dat or `/stats` and no extra metric: nsqd answers, and
writes, as 1.3.0 does. Go nsqd ignores the key when it loads such an nsqd.dat and drops it when it rewrites the
file (docs/operations.md, "Downgrading to Go nsqd").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..go.durations import MILLISECOND, format_duration, parse_duration
from ..wire.names import is_valid_name

#: where a control can be set
TOPIC = "topic"
CHANNEL = "channel"


class SettingError(ValueError):
    """A value a control does not take; `str(err)` names the key and says what it takes."""


@dataclass(frozen=True, slots=True)
class QueueSetting:
    """One control: its key, how it reads a value (text or the JSON form), and the value that means off."""

    key: str
    #: the kind of queue it acts on (`channel`: set on a topic, it is the default of that topic's channels)
    acts_on: str
    #: a value from text (flag, TOML, HTTP) or its JSON form (nsqd.dat); ValueError says what it takes
    read: Callable[[Any], Any]
    #: the value in its JSON form (nsqd.dat, /stats); `read` takes it back
    to_json: Callable[[Any], Any]
    #: the value that leaves the control off (the process default unless a flag says otherwise)
    off: Any
    #: the `-h` text of its flag
    usage: str
    #: counters the control adds to a row of `/stats` (and `/metrics`) of a queue it is on in
    counters: tuple[str, ...] = ()
    #: the controls this one only qualifies (the overflow policy of the limits): on where one of them is
    qualifies: tuple[str, ...] = ()

    def parse(self, value: Any) -> Any:
        """The value, or SettingError naming the key."""
        try:
            return self.read(value)
        except ValueError as err:
            raise SettingError(f"{self.key}: {err}") from None

    @property
    def flag(self) -> str:
        return self.key.replace("_", "-")

    @property
    def scopes(self) -> tuple[str, ...]:
        """Where it can be set: a channel control on a topic or a channel, a topic control on a topic."""
        return (TOPIC, CHANNEL) if self.acts_on == CHANNEL else (TOPIC,)


def _count(value: Any) -> int:
    """A number of messages: a non-negative integer, 0 for no limit."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError("must be a non-negative integer (0: no limit)")


def _size(value: Any) -> int:
    """A number of bytes: a non-negative integer, 0 for no limit."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError("must be a non-negative number of bytes (0: no limit)")


def _ttl(value: Any) -> int:
    """A duration: Go's text (`30s`, `1h30m`), or int nanoseconds (the option's own value); 0 (none) or >= 1 ms."""
    if isinstance(value, str):
        try:
            value = parse_duration(value)
        except ValueError:
            raise ValueError("must be a duration such as 30s or 1h30m (0: none)") from None
    if isinstance(value, int) and not isinstance(value, bool) and (value == 0 or value >= MILLISECOND):
        return value
    raise ValueError("must be 0 (none) or at least 1ms")


#: the part of a dead-letter template that stands for the topic's name
TOPIC_PLACEHOLDER = "{topic}"


def _template(value: Any) -> str:
    """A dead-letter topic name with `{topic}` for the topic's name, e.g. `{topic}.dead`."""
    if isinstance(value, str) and TOPIC_PLACEHOLDER in value and is_valid_name(value.replace(TOPIC_PLACEHOLDER, "t")):
        return value
    raise ValueError("must be a topic name containing {topic}, such as {topic}.dead")


def dead_letter_topic(template: str, topic: str) -> str | None:
    """The dead-letter topic of ``topic``; None when ``topic`` is itself one under this template (a dead-letter
    topic takes no dead letters of its own) or the name would not be a valid topic name (over 64 characters)."""
    if _is_dead_letter(template, topic):
        return None
    name = template.replace(TOPIC_PLACEHOLDER, topic)
    return name if is_valid_name(name) else None


def check_dead_letter_name(template: str, topic: str) -> None:
    """SettingError when ``topic``'s dead-letter topic would not be a valid name (over 64 characters)."""
    name = template.replace(TOPIC_PLACEHOLDER, topic)
    if not _is_dead_letter(template, topic) and not is_valid_name(name):
        raise SettingError(f"dead_letter_topic: {name!r} is not a valid topic name (at most 64 characters)")


def _is_dead_letter(template: str, topic: str) -> bool:
    head, _, tail = template.partition(TOPIC_PLACEHOLDER)
    return len(topic) > len(head) + len(tail) and topic.startswith(head) and topic.endswith(tail)


def _choice(*choices: str) -> Callable[[Any], str]:
    def read(value: Any) -> str:
        if value in choices:
            return str(value)
        raise ValueError(f"must be one of {', '.join(choices)}")

    return read


def _same(value: Any) -> Any:
    return value


#: what a bounded channel does at its limit (RabbitMQ's `overflow` names)
DROP_HEAD = "drop-head"
REJECT_PUBLISH = "reject-publish"

#: every control, in the order /stats and nsqd.dat list them
SETTINGS: tuple[QueueSetting, ...] = (
    QueueSetting("max_channel_depth", CHANNEL, _count, _same, 0,
                 "maximum messages a channel holds, queued, in flight and deferred together (0: no limit; "
                 "beyond nsqd)", counters=("dropped_count",)),
    QueueSetting("max_channel_bytes", CHANNEL, _count, _same, 0,
                 "maximum bytes of message bodies a channel holds, queued, in flight and deferred together (0: no "
                 "limit; beyond nsqd)", counters=("dropped_count",)),
    QueueSetting("channel_overflow", CHANNEL, _choice(DROP_HEAD, REJECT_PUBLISH), _same,
                 DROP_HEAD, "what a channel at --max-channel-depth or --max-channel-bytes does: drop-head (drop its "
                 "oldest message) or reject-publish (refuse the publish, E_PUB_FAILED or HTTP 503) (beyond nsqd)",
                 qualifies=("max_channel_depth", "max_channel_bytes")),
    QueueSetting("msg_ttl", CHANNEL, _ttl, format_duration, 0,
                 "how long a message may wait, from its publish time: older ones are dropped, never delivered "
                 "(0: no limit; beyond nsqd)", counters=("expired_count",)),
    QueueSetting("max_attempts", CHANNEL, _count, _same, 0,
                 "deliveries a message gets: one that would get more goes to --dead-letter-topic instead (0: no "
                 "limit; beyond nsqd)", counters=("dead_letter_count",)),
    QueueSetting("dead_letter_topic", CHANNEL, _template, _same, "{topic}.dead",
                 "where a message past --max-attempts goes: a topic name, {topic} standing for its topic's (beyond "
                 "nsqd)", qualifies=("max_attempts",)),
    QueueSetting("topic_retention", TOPIC, _ttl, format_duration, 0,
                 "how long a topic keeps every message it accepted, FINed or not, for replay (0: no time limit; "
                 "retention is on where this or --topic-retention-bytes is set; beyond nsqd)"),
    QueueSetting("topic_retention_bytes", TOPIC, _size, _same, 0,
                 "the most bytes of messages a topic keeps for replay, counted in whole segments of "
                 "--max-bytes-per-file (0: no size limit; beyond nsqd)"),
)
BY_KEY: dict[str, QueueSetting] = {s.key: s for s in SETTINGS}


def for_scope(scope: str) -> tuple[QueueSetting, ...]:
    return tuple(s for s in SETTINGS if scope in s.scopes)


def parse_changes(query: Mapping[str, str], scope: str, ignore: Iterable[str]) -> dict[str, Any]:
    """`POST /<scope>/settings` parameters → {key: value, or None to clear the override}; SettingError for an
    unknown key (``ignore``: the parameters that name the queue) or a bad value."""
    skipped = set(ignore)
    changes: dict[str, Any] = {}
    for key, text in query.items():
        if key in skipped:
            continue
        found = BY_KEY.get(key)
        if found is None or scope not in found.scopes:
            raise SettingError(f"{key}: not a {scope} setting (known: {', '.join(s.key for s in for_scope(scope))})")
        changes[key] = None if text == "" else found.parse(text)
    return changes


def counters_of(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The counters a /stats row carries for the controls named in its `"settings"` (their row keys), in row order.
    A topic row names its channels' defaults there, and carries none of their counters."""
    in_force = row.get("settings") or {}
    return tuple(dict.fromkeys(c for s in SETTINGS if s.key in in_force for c in s.counters if c in row))


def check_defaults(defaults: Any) -> None:
    """Every process default read back through its control: SettingError naming the flag for a bad flag or TOML
    value."""
    for found in SETTINGS:
        try:
            found.read(getattr(defaults, found.key))
        except ValueError as err:
            raise SettingError(f"--{found.flag} {err}") from None


class QueueSettings:
    """The overrides one topic or channel has, and the values in force there (``parent``: the topic's, for a
    channel; ``defaults``: the options with the process-wide values)."""

    __slots__ = ("_defaults", "_parent", "overrides")

    def __init__(self, defaults: Any, parent: QueueSettings | None = None) -> None:
        self._defaults = defaults
        self._parent = parent
        self.overrides: dict[str, Any] = {}

    def value(self, key: str) -> Any:
        """The value in force: this queue's own, else its topic's, else the process default."""
        if key in self.overrides:
            return self.overrides[key]
        if self._parent is not None:
            return self._parent.value(key)
        return getattr(self._defaults, key)

    def source(self, key: str) -> str:
        """Where the value in force comes from: `channel`, `topic` or `default`."""
        if key in self.overrides:
            return CHANNEL if self._parent is not None else TOPIC
        return self._parent.source(key) if self._parent is not None else "default"

    def update(self, changes: Mapping[str, Any]) -> None:
        """Set overrides (None clears one: the topic's or the default's value applies again)."""
        for key, value in changes.items():
            if value is None:
                self.overrides.pop(key, None)
            else:
                self.overrides[key] = value

    def load(self, stored: Any, warn: Callable[[str], None]) -> None:
        """The overrides of an nsqd.dat entry's `"settings"`; a key or value this build does not take is skipped
        with a warning (a newer build's nsqd.dat still loads)."""
        if not isinstance(stored, dict):
            return
        for key, value in stored.items():
            found = BY_KEY.get(key)
            try:
                if found is None:
                    raise SettingError(f"{key}: unknown setting")
                self.overrides[key] = found.parse(value)
            except SettingError as err:
                warn(f"skipping stored setting - {err}")

    def stored(self) -> dict[str, Any] | None:
        """The overrides in their JSON form for nsqd.dat, None when there are none (no key is written)."""
        if not self.overrides:
            return None
        return {s.key: s.to_json(self.overrides[s.key]) for s in SETTINGS if s.key in self.overrides}

    def is_on(self, setting: QueueSetting) -> bool:
        """Whether the control acts here: its value in force is not off (a qualifier: where its control is on)."""
        if setting.qualifies:
            return any(self.is_on(BY_KEY[key]) for key in setting.qualifies)
        return self.value(setting.key) != setting.off

    def in_force(self, scope: str) -> dict[str, Any]:
        """For /stats (empty: no key): the controls acting here that are on, and this queue's overrides, with their
        values in force in JSON form."""
        return {s.key: s.to_json(self.value(s.key)) for s in for_scope(scope)
                if s.key in self.overrides or (s.acts_on == scope and self.is_on(s))}

    def describe(self, scope: str) -> dict[str, dict[str, Any]]:
        """Every control of the scope with its value in force and where it comes from (GET /<scope>/settings)."""
        return {s.key: {"value": s.to_json(self.value(s.key)), "source": self.source(s.key)}
                for s in for_scope(scope)}

    def counters(self, scope: str) -> tuple[str, ...]:
        """The counters of the controls acting here that are on (their /stats keys)."""
        return tuple(dict.fromkeys(c for s in for_scope(scope) if s.acts_on == scope and self.is_on(s)
                                   for c in s.counters))
