"""Go `time.ParseDuration` / `Duration.String()` compatibility."""

from __future__ import annotations

import pytest

from nsqd_py.go.durations import HOUR, MICROSECOND, MILLISECOND, MINUTE, SECOND, format_duration, parse_duration

MAX = (1 << 63) - 1


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("+0", 0),
        ("-0", 0),
        ("0s", 0),
        ("250ms", 250 * MILLISECOND),
        ("1h30m", HOUR + 30 * MINUTE),
        ("1.5s", 1500 * MILLISECOND),
        ("-1s", -SECOND),
        ("+5m", 5 * MINUTE),
        ("1ns", 1),
        ("3us", 3 * MICROSECOND),
        ("3\u00b5s", 3 * MICROSECOND),
        ("3\u03bcs", 3 * MICROSECOND),
        (".5s", 500 * MILLISECOND),
        ("1.s", SECOND),
        ("1h1m1s1ms1us1ns", HOUR + MINUTE + SECOND + MILLISECOND + MICROSECOND + 1),
        ("1.0000000005s", SECOND),  # sub-ns digits truncate like Go
        ("0.3333333333333h", 1199999999999),
        ("2562047h47m16.854775807s", MAX),
        ("-2562047h47m16.854775808s", -(1 << 63)),
    ],
)
def test_parse_duration(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("-", 'time: invalid duration "-"'),
        ("s", 'time: invalid duration "s"'),
        (".s", 'time: invalid duration ".s"'),
        ("1", 'time: missing unit in duration "1"'),
        ("100", 'time: missing unit in duration "100"'),
        ("1.5", 'time: missing unit in duration "1.5"'),
        ("1x", 'time: unknown unit "x" in duration "1x"'),
        ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
        ("1 s", 'time: unknown unit " s" in duration "1 s"'),
        ("1S", 'time: unknown unit "S" in duration "1S"'),
        ("2562047h47m16.854775808s", 'time: invalid duration "2562047h47m16.854775808s"'),
        ("9999999999999999999ns", 'time: invalid duration "9999999999999999999ns"'),
        ("1\u00e9s", 'time: unknown unit "\\xc3\\xa9s" in duration "1\\xc3\\xa9s"'),
    ],
)
def test_parse_duration_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (999, "999ns"),
        (1000, "1\u00b5s"),
        (1500, "1.5\u00b5s"),
        (MILLISECOND, "1ms"),
        (25 * MILLISECOND, "25ms"),
        (250 * MILLISECOND, "250ms"),
        (1_234_567, "1.234567ms"),
        (SECOND, "1s"),
        (1500 * MILLISECOND, "1.5s"),
        (MINUTE, "1m0s"),
        (15 * MINUTE, "15m0s"),
        (HOUR, "1h0m0s"),
        (HOUR + 30 * MINUTE, "1h30m0s"),
        (86_496_021_564, "1m26.496021564s"),
        (-SECOND, "-1s"),
        (-1500, "-1.5\u00b5s"),
        (MAX, "2562047h47m16.854775807s"),
        (-(1 << 63), "-2562047h47m16.854775808s"),
    ],
)
def test_format_duration(ns: int, text: str) -> None:
    assert format_duration(ns) == text


@pytest.mark.parametrize("ns", [0, 1, 999, 1001, 123_456_789, 59 * SECOND, 61 * MINUTE + 1, -7 * HOUR, MAX])
def test_round_trip(ns: int) -> None:
    assert parse_duration(format_duration(ns)) == ns
