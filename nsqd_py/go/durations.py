"""Go's `time.Duration` text forms, both ways, on int nanoseconds.

`parse_duration` accepts exactly what Go's `time.ParseDuration` accepts (`250ms`, `1h30m`, `1.5s`, `-1s`, `0`)
and raises `ValueError` carrying Go's error text; `format_duration` renders like `time.Duration.String()`
(`1m0s`, `250ms`, `1.5µs`, `0s`).
"""

from __future__ import annotations

NANOSECOND = 1
MICROSECOND = 1000 * NANOSECOND
MILLISECOND = 1000 * MICROSECOND
SECOND = 1000 * MILLISECOND
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_UNITS = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # micro sign
    "\u03bcs": MICROSECOND,  # Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}

_LIMIT = 1 << 63  # Go accumulates in uint64 and rejects anything past this
_DIGITS = "0123456789"


def _quote(s: str) -> str:
    """Quote like the time package does: ASCII as is, every other byte as \\xNN."""
    out = ['"']
    for ch in s:
        if ord(ch) >= 0x80 or ch < " ":
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogateescape"))
        elif ch in '"\\':
            out.append("\\" + ch)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _leading_int(s: str) -> tuple[int, str]:
    i, x = 0, 0
    while i < len(s) and s[i] in _DIGITS:
        x = x * 10 + ord(s[i]) - 48
        if x > _LIMIT:
            raise OverflowError
        i += 1
    return x, s[i:]


def _leading_fraction(s: str) -> tuple[int, float, str]:
    """Digits after the point; like Go, digits past int64 precision are consumed but ignored."""
    i, x, scale, overflow = 0, 0, 1.0, False
    while i < len(s) and s[i] in _DIGITS:
        if not overflow:
            y = x * 10 + ord(s[i]) - 48
            if x > (_LIMIT - 1) // 10 or y > _LIMIT:
                overflow = True
            else:
                x, scale = y, scale * 10
        i += 1
    return x, scale, s[i:]


def parse_duration(text: str) -> int:
    """Nanoseconds for a Go duration string; `ValueError` with Go's message (`time: invalid duration "x"`)."""
    invalid = ValueError("time: invalid duration " + _quote(text))
    s = text
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise invalid
    total = 0
    while s:
        if not (s[0] == "." or s[0] in _DIGITS):
            raise invalid
        before = len(s)
        try:
            whole, s = _leading_int(s)
        except OverflowError:
            raise invalid from None
        pre = len(s) != before
        frac, scale, post = 0, 1.0, False
        if s and s[0] == ".":
            s = s[1:]
            before = len(s)
            frac, scale, s = _leading_fraction(s)
            post = len(s) != before
        if not pre and not post:
            raise invalid
        i = 0
        while i < len(s) and not (s[i] == "." or s[i] in _DIGITS):
            i += 1
        if i == 0:
            raise ValueError("time: missing unit in duration " + _quote(text))
        unit_text, s = s[:i], s[i:]
        unit = _UNITS.get(unit_text)
        if unit is None:
            raise ValueError(f"time: unknown unit {_quote(unit_text)} in duration {_quote(text)}")
        if whole > _LIMIT // unit:
            raise invalid
        whole *= unit
        if frac > 0:
            # Go does this step in float64 too, so sub-ns rounding matches.
            whole += int(float(frac) * (float(unit) / scale))
            if whole > _LIMIT:
                raise invalid
        total += whole
        if total > _LIMIT:
            raise invalid
    if neg:
        return -total
    if total > _LIMIT - 1:
        raise invalid
    return total


def _frac(v: int, prec: int) -> tuple[str, int]:
    """The `.ddd` part of v / 10**prec without trailing zeros (or "" if it is zero), and the integer part."""
    digits = []
    printing = False
    for _ in range(prec):
        v, digit = divmod(v, 10)
        printing = printing or digit != 0
        if printing:
            digits.append(str(digit))
    if not printing:
        return "", v
    return "." + "".join(reversed(digits)), v


def format_duration(ns: int) -> str:
    """Render int nanoseconds exactly like Go's `time.Duration.String()`."""
    u = abs(ns)
    sign = "-" if ns < 0 else ""
    if u < SECOND:
        if u == 0:
            return "0s"
        if u < MICROSECOND:
            return f"{sign}{u}ns"
        prec, unit = (3, "\u00b5s") if u < MILLISECOND else (6, "ms")
        frac, whole = _frac(u, prec)
        return f"{sign}{whole}{frac}{unit}"
    frac, secs = _frac(u, 9)
    mins, secs = divmod(secs, 60)
    out = f"{secs}{frac}s"
    if mins:
        hours, mins = divmod(mins, 60)
        out = f"{mins}m{out}"
        if hours:
            out = f"{hours}h{out}"
    return sign + out
