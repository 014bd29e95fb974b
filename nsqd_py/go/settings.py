"""Options defined once, as Go's daemons and tools take them: a flag, a TOML key, go-options precedence.

Each option is a dataclass field made by `setting(...)`: its flag, kind, usage text and default live in that one
place (like a gunicorn Setting), and everything else is derived from the class: the FlagSet (`flag_set`), the TOML
keys (`toml_keys`), Go's struct field name for errors (`go_field_name`), and the resolution of flags, then TOML,
then defaults (`resolve`, go-options' `Resolve`). nsqd, nsqlookupd and every tool build their options from this.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any, Protocol, TypeVar

from .durations import MILLISECOND, format_duration, parse_duration
from .goflags import FlagSet, Kind, Parsed, Setter, format_float, parse_bool, parse_float, parse_int


class OptionsError(Exception):
    """Start-up option problem; the daemon exits 1. `str(err)` is Go's text without any log prefix.

    How the caller prints it depends on the subclass:
    * `ConfigError`: `<prefix><time> FATAL: <text>` (the daemon's logFatal), e.g. `failed to load config file ...`.
    * `ResolveError`: Go's bare standard logger, `2006/01/02 15:04:05 <text>`, no prefix and no level.
    * nsqd's `InstantiateError`: `<prefix><time> FATAL: failed to instantiate nsqd - <text>`.
    """


class ConfigError(OptionsError):
    """The TOML file cannot be read or one of its text-form keys is invalid."""


class ResolveError(OptionsError):
    """A value Go rejects with `log.Fatalf` (go-options coercion, an unparsable percentile flag)."""


# --- Go's view of decoded TOML values --------------------------------------------------------------------------


def go_type(value: Any) -> str:
    """The Go type BurntSushi/toml decodes ``value`` to, as `%T` prints it."""
    import datetime  # error paths only

    names = {bool: "bool", int: "int64", float: "float64", str: "string", list: "[]interface {}",
             dict: "map[string]interface {}", datetime.datetime: "time.Time"}
    return names.get(type(value), type(value).__name__)


def go_v(value: Any) -> str:
    """Go's `%v` for a decoded TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, list):
        return "[" + " ".join(go_v(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_v(value[k])}" for k in sorted(value)) + "]"
    return str(value)


# --- go-options' coercions of a TOML value to the option's type -------------------------------------------------


def coerce_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    return f"%!s({go_type(value)}={go_v(value)})"  # Go's fmt.Sprintf("%s", v) on a non-string


def coerce_int(value: Any) -> int:
    if isinstance(value, str):
        return parse_int(value, 10)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"invalid int64 value type {go_type(value)}")


def coerce_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return parse_bool(value)
    if isinstance(value, int):
        return value == 0  # go-options quirk: a TOML integer reads inverted (0 → true, 1 → false)
    raise ValueError(f"invalid bool value type {go_type(value)}")


def coerce_duration(value: Any) -> int:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value * MILLISECOND  # bare TOML integers are milliseconds
    raise ValueError(f"invalid time.Duration value type {go_type(value)}")


def coerce_strings(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else []
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"invalid value type {go_type(value)}")
    return [item.strip() for item in items if item.strip()]


def coerce_floats(value: Any) -> list[float]:
    if isinstance(value, str):
        return [parse_float(part.strip()) for part in value.split(",")]
    if isinstance(value, list):
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
            raise ValueError(f"invalid value type {go_type(value)}")
        return [float(v) for v in value]
    return []


def _same(value: Any) -> Any:
    return value


# --- kinds and settings ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OptionKind:
    """How one kind of option is read from a flag and from TOML, and written back as TOML."""

    #: goflags' built-in kind of the flag; None for a custom flag read by `setter`
    builtin: Kind | None
    from_toml: Callable[[Any], Any] = _same
    to_toml: Callable[[Any], Any] = _same
    #: a custom flag's `setter(text, current)`; for `toml_text` kinds it also reads the TOML value's text
    setter: Setter | None = None
    #: a custom flag's value as its usage shows it (Go's `Value.String()`), and its zero value
    show: Callable[[Any], str] = str
    zero: Any = None
    is_bool: bool = False
    #: the daemon's `config.Validate()` parses the TOML value from its text form (with `setter`) before resolving
    toml_text: bool = False
    #: the current value as go-options shows it in a coercion error
    shown: Callable[[Any], str] = go_v

    def define(self, flags: FlagSet, name: str, default: Any, usage: str) -> None:
        default = list(default) if isinstance(default, list) else default  # the flag never shares a default list
        if self.builtin is not None:
            flags.add(name, self.builtin, default, usage)
        else:
            assert self.setter is not None
            flags.add_var(name, default, usage, self.setter, show=self.show, zero=self.zero, is_bool=self.is_bool)


STRING = OptionKind("string", coerce_string)
INT = OptionKind("int", coerce_int)
BOOL = OptionKind("bool", coerce_bool)
FLOAT = OptionKind("float")
DURATION = OptionKind("duration", coerce_duration, to_toml=format_duration, shown=format_duration)
LIST = OptionKind("list", coerce_strings, to_toml=list)


def custom(setter: Setter, *, show: Callable[[Any], str] = str, zero: Any = None) -> OptionKind:
    """A flag read by ``setter(text, current)`` (Go's `flag.Var`), for tools without a TOML file."""
    return OptionKind(None, setter=setter, show=show, zero=zero)


@dataclass(frozen=True, slots=True)
class Setting:
    """One option: its flag, kind and usage; its TOML key (None: flag only) and Go's struct field name."""

    flag: str
    kind: OptionKind
    usage: str
    key: str | None
    go_field: str


#: words Go spells as initialisms in struct field names (`TCPAddress`, `StatsdUDPPacketSize`)
_GO_INITIALISMS = {"id": "ID", "tcp": "TCP", "http": "HTTP", "https": "HTTPS", "tls": "TLS", "ca": "CA",
                   "udp": "UDP", "e2e": "E2E", "nsqlookupd": "NSQLookupd"}


def go_field_name(attr: str) -> str:
    """Go's struct field name for an attribute: `broadcast_tcp_port` → `BroadcastTCPPort`."""
    return "".join(_GO_INITIALISMS.get(part, part.capitalize()) for part in attr.split("_"))


def setting(flag: str, kind: OptionKind, default: Any, usage: str, *, key: str | None = "", go_field: str = "") -> Any:
    """A dataclass field that is also an option. A callable ``default`` is called for each new object (the
    hostname); a list default is copied. ``key``: the TOML key when it is not the flag name with `-` → `_` (None:
    no TOML key). ``go_field``: Go's struct field name when `go_field_name` does not derive it."""
    toml_key = None if key is None else key or flag.replace("-", "_")
    meta = {"setting": Setting(flag, kind, usage, toml_key, go_field)}
    if callable(default):
        return field(default_factory=default, metadata=meta)
    if isinstance(default, list):
        return field(default_factory=functools.partial(list, default), metadata=meta)
    return field(default=default, metadata=meta)


_SETTINGS: dict[type, tuple[tuple[str, Setting], ...]] = {}


def settings_of(cls: type) -> tuple[tuple[str, Setting], ...]:
    """Every (attribute, Setting) of an options class, in field order (go-options' order of resolution)."""
    found = _SETTINGS.get(cls)
    if found is None:
        found = _SETTINGS[cls] = tuple((f.name, _named(f)) for f in fields(cls) if "setting" in f.metadata)
    return found


def _named(f: Field[Any]) -> Setting:
    meta: Setting = f.metadata["setting"]
    return meta if meta.go_field else Setting(meta.flag, meta.kind, meta.usage, meta.key, go_field_name(f.name))


def toml_keys(cls: type) -> dict[str, str]:
    """Every TOML key of an options class → its attribute."""
    return {meta.key: attr for attr, meta in settings_of(cls) if meta.key is not None}


def flag_set(name: str, defaults: Any, extra: Callable[[FlagSet], None] | None = None) -> FlagSet:
    """The FlagSet of an options object: one flag per setting, its default taken from ``defaults``; ``extra``
    defines flags that set no option (`--config`, `--version`, deprecated ones)."""
    flags = FlagSet(name)
    if extra is not None:
        extra(flags)
    for attr, meta in settings_of(type(defaults)):
        meta.kind.define(flags, meta.flag, getattr(defaults, attr), meta.usage)
    return flags


def parse_flags(cls: type, name: str, argv: Sequence[str]) -> tuple[Any, Parsed]:
    """A tool's options from the command line alone (Go's `flag.Parse`; usage and exit 2 on errors)."""
    opts = cls()
    parsed = flag_set(name, opts).parse(argv)
    for attr, meta in settings_of(cls):
        setattr(opts, attr, parsed.values[meta.flag])
    return opts, parsed


class DaemonOptions(Protocol):
    """What a daemon's options class has besides its settings: `--version` was asked for."""

    show_version: bool


_Daemon = TypeVar("_Daemon", bound=DaemonOptions)


# --- TOML and resolution ---------------------------------------------------------------------------------------


def load_toml(path: str) -> dict[str, Any]:
    """The decoded config file, or ConfigError with the daemon's text (`failed to load config file ...`)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except IsADirectoryError:
        raise ConfigError(f"failed to load config file {path} - read {path}: is a directory") from None
    except OSError as err:
        reason = err.strerror or str(err)
        reason = reason[:1].lower() + reason[1:]
        raise ConfigError(f"failed to load config file {path} - open {path}: {reason}") from None
    import tomllib  # only with --config

    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"failed to load config file {path} - {err}") from None


def translate_text_keys(cls: type, cfg: dict[str, Any], order: tuple[str, ...]) -> None:
    """The daemon's `config.Validate()`: these keys are parsed from their text form first, in ``order``; junk is
    fatal. A setter answering None (`tls_min_version = ""`) drops the key: the flag or default stays."""
    by_key = {meta.key: meta for _attr, meta in settings_of(cls)}
    for key in order:
        if key not in cfg:
            continue
        setter = by_key[key].kind.setter
        assert setter is not None
        try:
            parsed = setter(go_v(cfg[key]), None)
        except ValueError:
            raise ConfigError(f"failed parsing {key} {go_v(cfg[key])}") from None
        if parsed is None:
            del cfg[key]
        else:
            cfg[key] = parsed


def resolve(opts: Any, parsed: Parsed, cfg: dict[str, Any]) -> None:
    """go-options' `Resolve`: a flag given on the command line, else the TOML key, else the default."""
    for attr, meta in settings_of(type(opts)):
        if meta.flag in parsed.explicit:
            setattr(opts, attr, parsed.values[meta.flag])
        elif meta.key is not None and meta.key in cfg:
            setattr(opts, attr, _coerce(meta, cfg[meta.key], getattr(opts, attr)))


def deprecated_verbose(flags: FlagSet) -> None:
    """`--verbose`, which every NSQ daemon still accepts (and ignores) since --log-level replaced it."""
    flags.add("verbose", "bool", False, "[deprecated] has no effect, use --log-level")


def parse_daemon_options(opts: _Daemon, name: str, argv: Sequence[str], text_keys: tuple[str, ...],
                         extra: Callable[[FlagSet], None] | None = None) -> _Daemon:
    """A daemon's start-up: flags (usage and exit 2 on errors), then its `--config` TOML (``text_keys`` read from
    their text form first), resolved into ``opts`` with go-options precedence. The options class has a `config`
    and a `version` flag; with `--version` the options come back at once with only `show_version` set, as the
    daemons print their version before reading the config."""
    parsed = flag_set(name, opts, extra).parse(argv)
    if parsed.values["version"]:
        opts.show_version = True
        return opts
    config = parsed.values["config"]
    cfg = load_toml(config) if config else {}
    translate_text_keys(type(opts), cfg, text_keys)
    resolve(opts, parsed, cfg)
    return opts


def _coerce(meta: Setting, value: Any, current: Any) -> Any:
    try:
        return meta.kind.from_toml(value)
    except ValueError as err:
        raise ResolveError(f"ERROR: Resolve failed to coerce value {go_v(value)} ({meta.kind.shown(current)}) "
                           f"for field {meta.go_field} - {err}") from None
