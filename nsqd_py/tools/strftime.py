"""`--datetime-format` exactly as nsq_to_file renders it: strftime converted to a Go layout, then Go's
`time.Format` — so literal text that looks like a Go layout token ("Jan", "15", "_2", ".000" ...) is formatted
too, just as in the Go tool.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable

#: strftime directive -> Go layout (nsq_to_file's strftime.go table)
_CONVERSION = {
    "B": "January", "b": "Jan", "m": "01", "A": "Monday", "a": "Mon", "d": "02", "H": "15", "I": "03",
    "M": "04", "S": "05", "Y": "2006", "y": "06", "p": "PM", "Z": "MST", "z": "-0700", "%": "%",
}

_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_ZERO_X = {"1": "01", "2": "02", "3": "03", "4": "04", "5": "05", "6": "06"}
_ZONES = ("070000", "07:00:00", "0700", "07:00", "07")


def to_go_layout(fmt: str) -> str:
    """nsq_to_file's strftimeToGoFormat: known `%x` become Go layout tokens, everything else stays."""
    out, i = [], 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt) and fmt[i + 1] in _CONVERSION:
            out.append(_CONVERSION[fmt[i + 1]])
            i += 2
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)


def strftime(fmt: str, when: dt.datetime | None = None) -> str:
    """Render ``fmt`` for ``when`` (default: now, local time) like nsq_to_file's `strftime`."""
    return go_format(to_go_layout(fmt), when or dt.datetime.now().astimezone())


def has_subseconds(fmt: str) -> bool:
    """Whether the rendering can change within one second (a `.000`-style token in the layout)."""
    return any(token[:1] in ".," for _, token in compile_layout(to_go_layout(fmt)))


def _next_token(layout: str) -> tuple[str, str, str]:
    """Go's nextStdChunk: (literal prefix, token, rest); token "" when the layout has no more tokens."""
    n = len(layout)
    for i, c in enumerate(layout):
        nxt = layout[i + 1] if i + 1 < n else ""
        if c == "J" and layout.startswith("Jan", i):
            if layout.startswith("January", i):
                return layout[:i], "January", layout[i + 7 :]
            if not _starts_lower(layout[i + 3 :]):
                return layout[:i], "Jan", layout[i + 3 :]
        elif c == "M" and layout.startswith("Mon", i):
            if layout.startswith("Monday", i):
                return layout[:i], "Monday", layout[i + 6 :]
            if not _starts_lower(layout[i + 3 :]):
                return layout[:i], "Mon", layout[i + 3 :]
        elif c == "M" and layout.startswith("MST", i):
            return layout[:i], "MST", layout[i + 3 :]
        elif c == "0":
            if nxt in _ZERO_X:
                return layout[:i], _ZERO_X[nxt], layout[i + 2 :]
            if layout.startswith("002", i):
                return layout[:i], "002", layout[i + 3 :]
        elif c == "1":
            return (layout[:i], "15", layout[i + 2 :]) if nxt == "5" else (layout[:i], "1", layout[i + 1 :])
        elif c == "2":
            if layout.startswith("2006", i):
                return layout[:i], "2006", layout[i + 4 :]
            return layout[:i], "2", layout[i + 1 :]
        elif c == "_":
            if nxt == "2":
                if layout.startswith("2006", i + 1):
                    return layout[: i + 1], "2006", layout[i + 5 :]
                return layout[:i], "_2", layout[i + 2 :]
            if layout.startswith("__2", i):
                return layout[:i], "__2", layout[i + 3 :]
        elif c in "345":
            return layout[:i], c, layout[i + 1 :]
        elif (c == "P" and nxt == "M") or (c == "p" and nxt == "m"):
            return layout[:i], c + nxt, layout[i + 2 :]
        elif c in "-Z":
            for zone in _ZONES:
                if layout.startswith(zone, i + 1):
                    return layout[:i], c + zone, layout[i + 1 + len(zone) :]
        elif c in ".," and nxt in ("0", "9"):
            j = i + 1
            while j < n and layout[j] == nxt:
                j += 1
            if not (j < n and layout[j].isdigit()):
                return layout[:i], layout[i:j], layout[j:]
    return layout, "", ""


def _starts_lower(s: str) -> bool:
    return bool(s) and "a" <= s[0] <= "z"


@functools.lru_cache(maxsize=64)
def compile_layout(layout: str) -> tuple[tuple[str, str], ...]:
    """The layout as (literal, token) pairs; token "" only for trailing text."""
    chunks = []
    while layout:
        prefix, token, layout = _next_token(layout)
        chunks.append((prefix, token))
    return tuple(chunks)


def go_format(layout: str, t: dt.datetime) -> str:
    """Go's `time.Time.Format` for an aware datetime (`t.tzinfo` set)."""
    return "".join(prefix + (_render(token, t) if token else "") for prefix, token in compile_layout(layout))


def _hour12(t: dt.datetime) -> int:
    return t.hour % 12 or 12


_SIMPLE: dict[str, Callable[[dt.datetime], str]] = {
    "January": lambda t: _MONTHS[t.month - 1],
    "Jan": lambda t: _MONTHS[t.month - 1][:3],
    "1": lambda t: str(t.month),
    "01": lambda t: f"{t.month:02d}",
    "Monday": lambda t: _DAYS[t.weekday()],
    "Mon": lambda t: _DAYS[t.weekday()][:3],
    "2": lambda t: str(t.day),
    "_2": lambda t: f"{t.day:2d}",
    "02": lambda t: f"{t.day:02d}",
    "__2": lambda t: f"{t.timetuple().tm_yday:3d}",
    "002": lambda t: f"{t.timetuple().tm_yday:03d}",
    "15": lambda t: f"{t.hour:02d}",
    "3": lambda t: str(_hour12(t)),
    "03": lambda t: f"{_hour12(t):02d}",
    "4": lambda t: str(t.minute),
    "04": lambda t: f"{t.minute:02d}",
    "5": lambda t: str(t.second),
    "05": lambda t: f"{t.second:02d}",
    "2006": lambda t: f"{t.year:04d}",
    "06": lambda t: f"{t.year % 100:02d}",
    "PM": lambda t: "PM" if t.hour >= 12 else "AM",
    "pm": lambda t: "pm" if t.hour >= 12 else "am",
}


def _render(token: str, t: dt.datetime) -> str:
    simple = _SIMPLE.get(token)
    if simple is not None:
        return simple(t)
    utcoffset = t.utcoffset()
    offset = int(utcoffset.total_seconds()) if utcoffset is not None else 0
    if token == "MST":
        return t.tzname() or _zone("-0700", offset)
    if token[0] in "-Z":
        if token[0] == "Z" and offset == 0:
            return "Z"
        return _zone(token[1:], offset)
    digits = f"{t.microsecond * 1000:09d}"[: len(token) - 1]
    if token[1] == "9":
        digits = digits.rstrip("0")
        return token[0] + digits if digits else ""
    return token[0] + digits


def _zone(shape: str, offset: int) -> str:
    """A numeric zone in one of Go's shapes (`0700`, `07:00`, `07`, with seconds when the shape has them)."""
    sign = "-" if offset < 0 else "+"
    hours, rest = divmod(abs(offset), 3600)
    minutes, seconds = divmod(rest, 60)
    colon = ":" in shape
    parts = [f"{hours:02d}"]
    if len(shape.replace(":", "")) >= 4:
        parts.append(f"{minutes:02d}")
    if len(shape.replace(":", "")) == 6:
        parts.append(f"{seconds:02d}")
    return sign + (":" if colon else "").join(parts)
