"""config/queue_settings.py alone: reading values, resolution, what nsqd.dat and /stats get."""

from __future__ import annotations

import pytest

from nsqd_py.config.options import CONFIG_KEYS, Options
from nsqd_py.config.queue_settings import (
    BY_KEY,
    CHANNEL,
    SETTINGS,
    TOPIC,
    QueueSettings,
    SettingError,
    parse_changes,
)


def test_every_control_is_an_option_of_the_same_name_and_off_by_default() -> None:
    opts = Options()
    for control in SETTINGS:
        assert control.key in CONFIG_KEYS
        assert getattr(opts, control.key) == control.off


def test_values_read_from_text_and_from_their_json_form() -> None:
    depth = BY_KEY["max_channel_depth"]
    assert depth.parse("12") == depth.parse(12) == 12
    for bad in ("-1", "1.5", "", True, -3, None):
        with pytest.raises(SettingError, match="max_channel_depth: must be a non-negative integer"):
            depth.parse(bad)
    with pytest.raises(SettingError, match="channel_overflow: must be one of drop-head, reject-publish"):
        BY_KEY["channel_overflow"].parse("DROP-HEAD")


def test_channel_beats_topic_beats_default() -> None:
    opts = Options(max_channel_depth=9)
    topic = QueueSettings(opts)
    channel = QueueSettings(opts, topic)
    assert (channel.value("max_channel_depth"), channel.source("max_channel_depth")) == (9, "default")
    topic.update({"max_channel_depth": 5})
    assert (channel.value("max_channel_depth"), channel.source("max_channel_depth")) == (5, "topic")
    channel.update({"max_channel_depth": 1})
    assert (channel.value("max_channel_depth"), channel.source("max_channel_depth")) == (1, "channel")
    channel.update({"max_channel_depth": None})
    assert channel.value("max_channel_depth") == 5


def test_nothing_stored_or_reported_while_nothing_is_set() -> None:
    channel = QueueSettings(Options(), QueueSettings(Options()))
    assert channel.stored() is None
    assert channel.in_force(CHANNEL) == {}
    assert channel.counters(CHANNEL) == ()


def test_a_qualifier_shows_with_its_control_only() -> None:
    opts = Options()
    channel = QueueSettings(opts, QueueSettings(opts))
    channel.update({"max_channel_depth": 4})
    assert channel.in_force(CHANNEL) == {"max_channel_depth": 4, "channel_overflow": "drop-head"}
    assert channel.counters(CHANNEL) == ("dropped_count",)
    assert channel.stored() == {"max_channel_depth": 4}


def test_load_skips_what_this_build_does_not_take() -> None:
    warnings: list[str] = []
    settings = QueueSettings(Options())
    settings.load({"max_channel_depth": 3, "from_the_future": 1, "channel_overflow": "sideways"}, warnings.append)
    assert settings.overrides == {"max_channel_depth": 3}
    assert warnings == ["skipping stored setting - from_the_future: unknown setting",
                        "skipping stored setting - channel_overflow: must be one of drop-head, reject-publish"]


def test_changes_from_a_query() -> None:
    assert parse_changes({"topic": "t", "max_channel_depth": "3", "channel_overflow": ""}, TOPIC, ["topic"]) == {
        "max_channel_depth": 3, "channel_overflow": None}
    with pytest.raises(SettingError, match="nope: not a topic setting"):
        parse_changes({"nope": "1"}, TOPIC, ["topic"])
