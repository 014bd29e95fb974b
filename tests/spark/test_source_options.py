"""The "nsq" format's options, without Spark or nsqd: every option docs/spark.md lists works under its camelCase name
and in snake_case, the names of earlier versions still work, and bad values fail when Spark plans the query."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from nsqd_py.spark.options import (
    ConnectOptions,
    OptionError,
    ReadOptions,
    WriteOptions,
    canonical,
    normalize,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
READ_BASE = {"subscribe": "t", "channel": "c", "nsqdTcpAddresses": "h:1"}
WRITE_BASE = {"topic": "t", "nsqdTcpAddresses": "h:1"}

#: a value other than the default for every documented option, and what it changes in the base options (None: drops)
SAMPLES: dict[str, tuple[str, dict[str, str | None]]] = {
    "subscribe": ("u,v", {}), "subscribePattern": ("t.*", {"subscribe": None}), "startingOffsets": ("latest", {}),
    "endingTimestamp": ("1700000000000", {}), "startingTimestamp": ("1700000000000", {}),
    "startingOffsetsByTimestamp": ('{"t": 1700000000000}', {}), "topic": ("u", {}), "channel": ("d", {}),
    "nsqdTcpAddresses": ("h:2", {}), "nsqdHttpAddresses": ("h:3", {}),
    "lookupdHttpAddresses": ("l:4161", {"nsqdTcpAddresses": None}), "maxOffsetsPerTrigger": ("7", {}),
    "minOffsetsPerTrigger": ("3", {}), "maxTriggerDelay": ("2s", {}), "maxBytesPerTrigger": ("100", {}),
    "minPartitions": ("5", {}), "writeAheadLocation": ("/w", {}), "minBatchesToRetain": ("3", {}),
    "failOnDataLoss": ("false", {}), "failOnUnreachable": ("true", {}), "pollTimeout": ("2s", {}),
    "maxAttempts": ("4", {}), "deadLetterTopic": ("dead", {}), "readMode": ("driver", {}), "msgTimeout": ("2s", {}),
    "idleTimeout": ("3s", {}), "maxInFlight": ("10", {}), "maxInFlightBytes": ("1000", {}),
    "lookupdPollInterval": ("5s", {}), "mpubMaxMessages": ("9", {}), "mpubMaxBytes": ("99", {}),
    "mpubWindow": ("1", {}), "requestTimeout": ("2s", {}), "fetchMaxBytes": ("4096", {}),
    "connectTimeout": ("3s", {}), "tls": ("true", {}), "tlsCaFile": ("ca.pem", {}),
    "tlsCertFile": ("cert.pem", {}), "tlsKeyFile": ("key.pem", {}), "tlsInsecureSkipVerify": ("true", {}),
    "tlsServerName": ("n", {}), "snappy": ("true", {}), "deflate": ("true", {}), "deflateLevel": ("9", {}),
    "authSecret": ("s", {}), "clientId": ("q", {}), "hostname": ("w", {}), "heartbeatInterval": ("-1", {}),
    "outputBufferTimeout": ("100", {}), "sampleRate": ("10", {}),
}


def documented() -> dict[str, str]:
    """The options table of docs/spark.md: every name in an option's cell, with its read, write or both."""
    table = DOCS.read_text().split("\n## Options\n", 1)[1].split("\n### ", 1)[0]
    names = {}
    for row in table.splitlines():
        cells = [cell.strip() for cell in row.split("|")]
        if len(cells) > 3 and cells[2] in ("read", "write", "both"):
            names.update(dict.fromkeys(re.findall(r"`([^`]+)`", cells[1]), cells[2]))
    return names


def snake(name: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), name)


def parsed(kind: str, given: dict[str, str | None]) -> list[Any]:
    """The read and/or write options of ``given`` over the base ones, whatever its spelling (None drops one)."""
    read: list[tuple[Any, dict[str, str]]] = [(ReadOptions, READ_BASE)]
    write: list[tuple[Any, dict[str, str]]] = [(WriteOptions, WRITE_BASE)]
    out = []
    for cls, base in {"read": read, "write": write, "both": read + write}[kind]:
        replaced = {canonical(key) for key in given}
        kept = {key: value for key, value in base.items() if canonical(key) not in replaced}
        merged = {key: value for key, value in {**kept, **given}.items() if value is not None}
        out.append(cls.parse(merged))
    return out


def test_the_documented_options_are_camel_case_and_every_declared_one_is_documented() -> None:
    names = documented()
    assert set(names) == set(SAMPLES)  # a new documented option needs a sample here
    assert [name for name in names if "_" in name] == []
    declared = {f.metadata["option"][0] for cls in (ReadOptions, WriteOptions, ConnectOptions) for f in fields(cls)
                if "option" in f.metadata}
    assert declared <= set(names)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_documented_option_works_in_both_spellings(name: str) -> None:
    kind = documented()[name]
    value, changes = SAMPLES[name]
    camel = parsed(kind, {**changes, name: value})
    assert camel != parsed(kind, {})  # the sample changes something
    assert parsed(kind, {**changes, snake(name): value}) == camel
    assert parsed(kind, {**changes, name.upper(): value}) == camel  # Spark's keys are case-insensitive


def test_one_option_under_two_names_must_have_one_value() -> None:
    for given in ({"maxOffsetsPerTrigger": "5", "max_offsets_per_trigger": "6"},
                  {"nsqdTcpAddresses": "h:1", "nsqd_tcp_addresses": "h:2"},
                  {"maxOffsetsPerTrigger": "5", "max_messages_per_batch": "6"},
                  {"minPartitions": "2", "num_partitions": "3"},
                  {"subscribe": "t", "topic": "u"}):
        with pytest.raises(OptionError, match="same option with different values"):
            ReadOptions.parse({**READ_BASE, **given})
    with pytest.raises(OptionError, match="'mpubWindow' and 'mpub_window'"):
        WriteOptions.parse({**WRITE_BASE, "mpubWindow": "1", "mpub_window": "2"})
    with pytest.raises(OptionError, match="authSecret") as raised:
        WriteOptions.parse({**WRITE_BASE, "authSecret": "s3cret", "auth_secret": "other"})
    assert "s3cret" not in str(raised.value)  # a secret stays out of the error
    same = ReadOptions.parse({**READ_BASE, "maxOffsetsPerTrigger": "5", "max_offsets_per_trigger": "5",
                              "max_messages_per_batch": "5", "topic": "t"})
    assert same == ReadOptions.parse({**READ_BASE, "maxOffsetsPerTrigger": "5"})


def test_options_the_source_does_not_know_are_ignored() -> None:
    assert ReadOptions.parse({**READ_BASE, "maxOffsetPerTrigger": "5"}) == ReadOptions.parse(READ_BASE)


def test_options_are_validated_case_insensitively() -> None:
    opts = ReadOptions.parse({"topic": "t", "channel": "c", "LOOKUPD_HTTP_ADDRESSES": "a:4161, b:4161",
                              "Max_Messages_Per_Batch": "50", "msgTimeout": "1m30s", "snappy": "true"})
    assert opts.connect.lookupd_http_addresses == ("a:4161", "b:4161")
    assert opts.max_messages_per_batch == 50 and opts.connect.msg_timeout == 90
    assert opts.max_in_flight == 150  # three batches: one awaiting its commit, one running, one filling
    assert opts.connect.identify_fields() == {"tls_v1": False, "snappy": True, "deflate": False,
                                              "msg_timeout": 90000}
    assert ReadOptions.parse({"topic": "t", "channel": "c", "nsqdTcpAddresses": "h:1",
                              "msgTimeout": "2500"}).connect.msg_timeout == 2.5  # bare numbers are ms
    bad = [
        ({"channel": "c", "nsqdTcpAddresses": "h:1"}, "topic"),
        ({"topic": "t", "channel": "bad channel", "nsqdTcpAddresses": "h:1"}, "channel"),
        ({"topic": "t", "channel": "c"}, "exactly one"),
        ({"topic": "t", "channel": "c", "nsqdTcpAddresses": "h:1", "lookupdHttpAddresses": "l:1"}, "exactly one"),
        ({"topic": "t", "channel": "c", "nsqdTcpAddresses": "h:1", "snappy": "yes", "deflate": "1"}, "snappy"),
        ({"topic": "t", "channel": "c", "nsqdTcpAddresses": "h:1", "msgTimeout": "10ms"}, "at least 1s"),
        ({"topic": "t", "channel": "c", "nsqdTcpAddresses": "h:1", "max_messages_per_batch": "0"}, "at least 1"),
        ({"topic": "t", "channel": "c", "nsqdTcpAddresses": "h:1", "tls": "maybe"}, "true or false"),
    ]
    for options, message in bad:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(options)
    assert WriteOptions.parse({"topic": "t", "nsqdTcpAddresses": "h:1"}).mpub_max_messages == 500


#: every option a class declares, a value for it, and what the field then holds (0 s means the default for some)
DECLARED: dict[Any, dict[str, tuple[str, object]]] = {
    ReadOptions: {"maxOffsetsPerTrigger": ("7", 7), "minOffsetsPerTrigger": ("3", 3), "maxTriggerDelay": ("2s", 2.0),
                  "maxBytesPerTrigger": ("100", 100), "minPartitions": ("5", 5), "failOnUnreachable": ("on", True),
                  "pollTimeout": ("0", 0.5), "maxAttempts": ("4", 4), "writeAheadLocation": ("/w", "/w"),
                  "maxInFlightBytes": ("1000", 1000), "idleTimeout": ("0", 0.0),
                  "lookupdPollInterval": ("1500", 1.5), "subscribePattern": ("t.*", "t.*"),
                  "startingOffsets": ("Latest", "latest"), "endingTimestamp": ("1700000000000", 1700000000000 * 10**6),
                  "minBatchesToRetain": ("3", 3), "failOnDataLoss": ("off", False), "fetchMaxBytes": ("4096", 4096),
                  "startingTimestamp": ("1700000000000", 1700000000000 * 10**6),
                  "startingOffsetsByTimestamp": ('{"t": "2023-11-14T22:13:20Z"}', (("t", 1700000000000 * 10**6),))},
    WriteOptions: {"mpubMaxMessages": ("9", 9), "mpubMaxBytes": ("99", 99), "mpubWindow": ("1", 1),
                   "requestTimeout": ("2s", 2.0)},
    ConnectOptions: {"nsqdTcpAddresses": ("h:1, h:2", ("h:1", "h:2")),
                     "nsqdHttpAddresses": ("h:3,h:4", ("h:3", "h:4")), "lookupdHttpAddresses": ("", ()),
                     "connectTimeout": ("0", 5.0), "tls": ("yes", True),
                     "tlsCaFile": ("ca", "ca"), "tlsCertFile": ("", None), "tlsKeyFile": ("k", "k"),
                     "tlsInsecureSkipVerify": ("1", True), "tlsServerName": ("n", "n"), "snappy": ("0", False),
                     "deflate": ("true", True), "deflateLevel": ("9", 9), "authSecret": ("s", "s"),
                     "msgTimeout": ("1m", 60.0), "clientId": ("q", "q"), "hostname": ("w", "w"),
                     "heartbeatInterval": ("-1", -1), "outputBufferTimeout": ("100", 100),
                     "sampleRate": ("0", 0)},
}


@pytest.mark.parametrize("cls", list(DECLARED))
def test_declared_options_are_read_into_their_fields(cls: Any) -> None:
    declared = {f.name: f.metadata["option"][0] for f in fields(cls) if "option" in f.metadata}
    assert set(declared.values()) == set(DECLARED[cls])  # a new option needs a row here
    given = {key.upper(): text for key, (text, _) in DECLARED[cls].items()}  # Spark's keys are case-insensitive
    base = {"channel": "c", "nsqdTcpAddresses": "h:1"}  # the topics come from subscribePattern
    if cls is WriteOptions:
        base["topic"] = "t"
    # read and write hand ConnectOptions the normalized map
    parsed = ConnectOptions.parse(normalize(given)) if cls is ConnectOptions else cls.parse({**base, **given})
    assert {name: getattr(parsed, name) for name in declared} == {
        name: DECLARED[cls][key][1] for name, key in declared.items()}


def test_kafka_option_names_and_their_aliases() -> None:
    base = {"channel": "c", "nsqdTcpAddresses": "h:4150"}
    opts = ReadOptions.parse({**base, "Subscribe": "a, b,a", "maxOffsetsPerTrigger": "1000",
                              "minOffsetsPerTrigger": "10", "maxTriggerDelay": "30s", "maxBytesPerTrigger": "4096",
                              "minPartitions": "4", "failOnUnreachable": "true", "maxAttempts": "5"})
    assert opts.topics == ("a", "b") and opts.read_mode == "executors"
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger, opts.max_trigger_delay) == (1000, 10, 30.0)
    assert (opts.max_bytes_per_trigger, opts.min_partitions, opts.fail_on_unreachable) == (4096, 4, True)
    assert opts.dead_letter_for("a") == "a_dead_letter" and opts.max_attempts == 5
    old = ReadOptions.parse({**base, "topic": "t", "max_messages_per_batch": "7", "num_partitions": "3"})
    assert (old.topics, old.max_offsets_per_trigger, old.min_partitions) == (("t",), 7, 3)
    defaults = ReadOptions.parse({**base, "topic": "t"})
    assert defaults.max_offsets_per_trigger is None and defaults.max_trigger_delay == 15 * 60
    for bad, message in [({"topic": "t", "subscribe": "u"}, "different values"),
                         ({"topic": "t", "maxOffsetsPerTrigger": "1", "max_messages_per_batch": "2"},
                          "different values"),
                         ({"subscribe": "a,b", "readMode": "driver"}, "one topic"),
                         ({"subscribe": "a", "readMode": "both"}, "readMode"),
                         ({"subscribe": "a b"}, "subscribe"),
                         ({"subscribe": "a", "deadLetterTopic": "bad name"}, "deadLetterTopic"),
                         ({"subscribe": "a", "nsqdHttpAddresses": "h:1,h:2"}, "one HTTP address"),
                         ({"subscribe": "a", "minPartitions": "0"}, "at least 1")]:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse({**base, **bad})


def test_options_of_planning() -> None:
    base = {"channel": "c", "nsqdTcpAddresses": "h:4150"}
    opts = ReadOptions.parse({**base, "subscribePattern": "clicks_.*", "startingOffsets": "LATEST",
                              "endingTimestamp": "2023-11-14T22:13:20.5Z"})
    assert (opts.topics, opts.subscribe_pattern, opts.starting_offsets) == ((), "clicks_.*", "latest")
    assert opts.ending_timestamp_ns == 1_700_000_000_500_000_000
    assert ReadOptions.parse({**base, "topic": "t", "endingTimestamp": "1700000000000"}).ending_timestamp_ns == \
        1_700_000_000_000_000_000
    defaults = ReadOptions.parse({**base, "subscribe": "t"})
    assert (defaults.subscribe_pattern, defaults.starting_offsets, defaults.ending_timestamp_ns) == \
        (None, "earliest", None)
    for bad, message in [({"subscribe": "a", "subscribePattern": "a.*"}, "exactly one"),
                         ({}, "exactly one"),
                         ({"subscribePattern": "("}, "regular expression"),
                         ({"subscribePattern": "a.*", "readMode": "driver"}, "one topic"),
                         ({"subscribe": "a", "startingOffsets": "{}"}, "earliest or latest"),
                         ({"subscribe": "a", "endingTimestamp": "2023-11-14T22:13:20"}, "offset from UTC"),
                         ({"subscribe": "a", "endingTimestamp": "yesterday"}, "epoch milliseconds")]:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse({**base, **bad})
