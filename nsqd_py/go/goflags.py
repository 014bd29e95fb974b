"""A command-line parser that behaves like Go's `flag` package, so our tools accept exactly what NSQ's do.

Go semantics kept: `-name` and `--name` are the same, values come as `-name=v` or `-name v`, booleans only take
a value with `=`, parsing stops at the first non-flag argument or after `--`, `-h`/`-help` print the usage, and
errors print Go's message plus the usage (`Usage of <name>:` and `PrintDefaults` layout) to stderr, then exit 2.

Setters passed to `FlagSet.add_var` report a bad value by raising `ValueError(reason)`; any other exception
propagates out of `FlagSet.parse` untouched (for values whose Go setter calls `log.Fatalf`).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, TextIO

from nsqd_py.go.durations import format_duration, parse_duration
from nsqd_py.go.gocompat import go_quote

Kind = Literal["string", "int", "bool", "duration", "float", "list"]
Setter = Callable[[str, Any], Any]

SYNTAX = "invalid syntax"
RANGE = "value out of range"

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class NumError(ValueError):
    """Go's `strconv.NumError`: str() is Go's text, `reason` is `invalid syntax` or `value out of range`."""

    def __init__(self, func: str, text: str, reason: str) -> None:
        super().__init__(f"strconv.{func}: parsing {go_quote(text)}: {reason}")
        self.reason = reason


def _underscore_ok(s: str) -> bool:
    """Go's rule: `_` only between digits, or between a base prefix and a digit."""
    if s[:1] in ("+", "-"):
        s = s[1:]
    saw, i, hexa = "^", 0, False
    if len(s) >= 2 and s[0] == "0" and s[1].lower() in "box":
        i, saw, hexa = 2, "0", s[1].lower() == "x"
    for ch in s[i:]:
        if ch.isascii() and (ch.isdigit() or (hexa and ch.lower() in "abcdef")):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def parse_int(text: str, base: int = 0, bits: int = 64) -> int:
    """Go's `strconv.ParseInt`; base 0 takes `0x`, `0o`, `0b`, a leading-`0` octal and `_` separators."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body:
        raise NumError("ParseInt", text, SYNTAX)
    digits, base0 = body, base == 0
    if base0:
        base = 10
        if body[0] == "0":
            prefix = body[1].lower() if len(body) >= 3 else ""
            base = {"b": 2, "o": 8, "x": 16}.get(prefix, 8)
            digits = body[2:] if prefix in ("b", "o", "x") else body[1:]
    value, limit, underscores = 0, (1 << 64) - 1, False
    for ch in digits:
        if ch == "_" and base0:
            underscores = True
            continue
        if ch.isascii() and ch.isdigit():
            d = ord(ch) - 48
        elif ch.isascii() and ch.isalpha():
            d = ord(ch.lower()) - 87
        else:
            raise NumError("ParseInt", text, SYNTAX)
        if d >= base:
            raise NumError("ParseInt", text, SYNTAX)
        value = value * base + d
        if value > limit:
            raise NumError("ParseInt", text, RANGE)
    if underscores and not _underscore_ok(body):
        raise NumError("ParseInt", text, SYNTAX)
    cutoff = 1 << (bits - 1)
    if text[0] == "-":
        if value > cutoff:
            raise NumError("ParseInt", text, RANGE)
        return -value
    if value >= cutoff:
        raise NumError("ParseInt", text, RANGE)
    return value


def parse_bool(text: str) -> bool:
    """Go's `strconv.ParseBool`: 1 t T TRUE true True / 0 f F FALSE false False."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise NumError("ParseBool", text, SYNTAX)


_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_HEX = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+")


def parse_float(text: str) -> float:
    """Go's `strconv.ParseFloat(s, 64)`: decimal or hex (`0x1p-2`) literals, `_` separators, inf/infinity/nan."""
    lowered = text.lower()
    unsigned = lowered[1:] if lowered[:1] in ("+", "-") else lowered
    if lowered == "nan" or unsigned in ("inf", "infinity"):
        return float(lowered)
    plain = text.replace("_", "")
    if "_" in text and not _underscore_ok(text):
        raise NumError("ParseFloat", text, SYNTAX)
    if _DECIMAL.fullmatch(plain):
        value = float(plain)
    elif _HEX.fullmatch(plain):
        value = float.fromhex(plain)
    else:
        raise NumError("ParseFloat", text, SYNTAX)
    if math.isinf(value):
        raise NumError("ParseFloat", text, RANGE)
    return value


def format_float(value: float) -> str:
    """Go's `strconv.FormatFloat(v, 'g', -1, 64)`, i.e. what `%v` prints for a float64 (`1.5`, `1e+06`)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    from decimal import Decimal  # on first use: a few ms of every start-up otherwise

    _, digit_tuple, exp = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple))
    stripped = digits.rstrip("0")
    exp = int(exp) + len(digits) - len(stripped)
    point = len(stripped) + exp - 1  # decimal exponent of the first digit
    sign = "-" if value < 0 else ""
    if point < -4 or point >= 6:  # shortest form switches to %e at precision 6
        mantissa = stripped[0] + ("." + stripped[1:] if len(stripped) > 1 else "")
        return f"{sign}{mantissa}e{'-' if point < 0 else '+'}{abs(point):02d}"
    if point < 0:
        return f"{sign}0.{'0' * (-point - 1)}{stripped}"
    whole = stripped[: point + 1].ljust(point + 1, "0")
    frac = stripped[point + 1 :]
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def _number_setter(parse: Callable[[str], Any]) -> Setter:
    """Go's flag values hide strconv detail behind `parse error` / `value out of range`."""

    def set_number(text: str, _current: Any) -> Any:
        try:
            return parse(text)
        except NumError as err:
            raise ValueError("parse error" if err.reason == SYNTAX else RANGE) from None

    return set_number


def _set_duration(text: str, _current: Any) -> int:
    try:
        return parse_duration(text)
    except ValueError:
        raise ValueError("parse error") from None


class FlagError(Exception):
    """A command-line error (already printed with the usage) when the FlagSet does not exit by itself."""


class HelpRequested(FlagError):
    """`-h`, `-help` or `--help` was given (the usage is already printed)."""


@dataclass(slots=True)
class Flag:
    """One defined flag; `show` is Go's `Value.String()`, used for the usage text."""

    name: str
    usage: str
    default: Any
    setter: Setter
    show: Callable[[Any], str]
    zero: Any
    type_name: str
    quote_default: bool = False
    is_bool: bool = False


@dataclass(slots=True)
class Parsed:
    """Result of `FlagSet.parse`: every flag's value (defaults included), those set explicitly, the rest."""

    values: dict[str, Any]
    explicit: set[str] = field(default_factory=set)
    args: list[str] = field(default_factory=list)


_BUILTINS: dict[str, tuple[Setter, Callable[[Any], str], Any, str]] = {
    "string": (lambda text, _cur: text, str, "", "string"),
    "int": (_number_setter(parse_int), str, 0, "int"),
    "bool": (_number_setter(parse_bool), lambda v: "true" if v else "false", False, ""),
    "duration": (_set_duration, format_duration, 0, "duration"),
    "float": (_number_setter(parse_float), format_float, 0.0, "float"),
    "list": (lambda text, cur: [*cur, text], ",".join, [], "value"),
}


class FlagSet:
    """A named set of flags; `parse` exits like Go's `flag.ExitOnError` unless `exit_on_error=False`."""

    def __init__(self, name: str, output: TextIO | None = None, *, exit_on_error: bool = True) -> None:
        self.name = name
        self.exit_on_error = exit_on_error
        self._output = output
        self._flags: dict[str, Flag] = {}

    def add(self, name: str, kind: Kind, default: Any, usage: str) -> None:
        """Define a built-in kind; durations are int ns, `list` is a repeatable string flag."""
        setter, show, zero, type_name = _BUILTINS[kind]
        self._define(
            Flag(name, usage, default, setter, show, zero, type_name, quote_default=kind == "string",
                 is_bool=kind == "bool")
        )

    def add_var(
        self,
        name: str,
        default: Any,
        usage: str,
        setter: Setter,
        *,
        show: Callable[[Any], str] = str,
        zero: Any = None,
        is_bool: bool = False,
    ) -> None:
        """Define a custom value (Go's `flag.Var`): `setter(text, current)` returns the new value."""
        self._define(Flag(name, usage, default, setter, show, zero, "" if is_bool else "value", is_bool=is_bool))

    def _define(self, flag: Flag) -> None:
        if flag.name in self._flags:
            raise ValueError(f"{self.name} flag redefined: {flag.name}")
        self._flags[flag.name] = flag

    def parse(self, args: Sequence[str]) -> Parsed:
        """Parse command-line arguments (without the program name)."""
        result = Parsed({name: _fresh(flag.default) for name, flag in self._flags.items()})
        rest = list(args)
        while rest:
            arg = rest[0]
            if len(arg) < 2 or arg[0] != "-":
                break
            dashes = 2 if arg[1] == "-" else 1
            if arg == "--":
                rest.pop(0)
                break
            name = arg[dashes:]
            if not name or name[0] in "-=":
                self._fail(f"bad flag syntax: {arg}")
            rest.pop(0)
            value: str | None = None
            if "=" in name[1:]:
                cut = name.index("=", 1)
                name, value = name[:cut], name[cut + 1 :]
            flag = self._flags.get(name)
            if flag is None:
                if name in ("help", "h"):
                    self.print_usage()
                    if self.exit_on_error:
                        raise SystemExit(0)
                    raise HelpRequested("flag: help requested")
                self._fail(f"flag provided but not defined: -{name}")
            current = result.values[name]
            if flag.is_bool:
                try:
                    result.values[name] = flag.setter("true" if value is None else value, current)
                except ValueError as err:
                    if value is None:
                        self._fail(f"invalid boolean flag {name}: {err}")
                    self._fail(f"invalid boolean value {go_quote(value)} for -{name}: {err}")
            else:
                if value is None:
                    if not rest:
                        self._fail(f"flag needs an argument: -{name}")
                    value = rest.pop(0)
                try:
                    result.values[name] = flag.setter(value, current)
                except ValueError as err:
                    self._fail(f"invalid value {go_quote(value)} for flag -{name}: {err}")
            result.explicit.add(name)
        result.args = rest
        return result

    def _fail(self, message: str) -> NoReturn:
        out = self._out()
        out.write(message + "\n")
        self.print_usage()
        if self.exit_on_error:
            raise SystemExit(2)
        raise FlagError(message)

    def _out(self) -> TextIO:
        return self._output or sys.stderr

    def print_usage(self) -> None:
        self._out().write(self.usage())

    def usage(self) -> str:
        """`Usage of <name>:` followed by Go's `PrintDefaults` layout (flags sorted by name)."""
        lines = [f"Usage of {self.name}:\n" if self.name else "Usage:\n"]
        for name in sorted(self._flags):
            flag = self._flags[name]
            type_name, usage = _unquote_usage(flag)
            head = f"  -{name}" + (f" {type_name}" if type_name else "")
            text = head + ("\t" if len(head) <= 4 else "\n    \t") + usage.replace("\n", "\n    \t")
            shown = flag.show(flag.default)
            if shown != flag.show(flag.zero):
                text += f" (default {go_quote(shown) if flag.quote_default else shown})"
            lines.append(text + "\n")
        return "".join(lines)


def _unquote_usage(flag: Flag) -> tuple[str, str]:
    """A `back-quoted` word in the usage names the argument, as in Go; otherwise the type name."""
    usage = flag.usage
    start = usage.find("`")
    if start >= 0:
        end = usage.find("`", start + 1)
        if end >= 0:
            name = usage[start + 1 : end]
            return name, usage[:start] + name + usage[end + 1 :]
    return flag.type_name, usage


def _fresh(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value
