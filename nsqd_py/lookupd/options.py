"""nsqlookupd's options: Go nsqlookupd's flags, `--config` TOML, and go-options precedence
(a flag given on the command line > the TOML key > the default). Durations are int nanoseconds."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..daemon.options import ResolveError, _go_v, _load_toml
from ..go.durations import MILLISECOND, SECOND, format_duration, parse_duration
from ..go.goflags import FlagSet
from ..runtime.log import INFO, LEVEL_NAMES, parse_level


@dataclass(slots=True)
class LookupdOptions:
    log_level: int = INFO
    log_prefix: str = "[nsqlookupd] "
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = field(default_factory=socket.gethostname)
    inactive_producer_timeout: int = 300 * SECOND
    tombstone_lifetime: int = 45 * SECOND
    show_version: bool = False


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"invalid string value type {type(value).__name__}")
    return value


def _duration(value: Any) -> int:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value * MILLISECOND  # go-options: a bare TOML integer is milliseconds
    raise ValueError(f"invalid time.Duration value type {type(value).__name__}")


def _log_level(value: Any) -> int:
    return parse_level(_string(value))


#: flag → (TOML key/attribute, kind, usage); kinds: string, duration, log_level
_OPTS: dict[str, tuple[str, str, str]] = {
    "log-level": ("log_level", "log_level", "set log verbosity: debug, info, warn, error, or fatal"),
    "log-prefix": ("log_prefix", "string", "log message prefix"),
    "tcp-address": ("tcp_address", "string", "<addr>:<port> to listen on for TCP clients"),
    "http-address": ("http_address", "string", "<addr>:<port> to listen on for HTTP clients"),
    "broadcast-address": ("broadcast_address", "string", "address of this lookupd node, (default to the OS hostname)"),
    "inactive-producer-timeout": ("inactive_producer_timeout", "duration",
                                  "duration of time a producer will remain in the active list since its last ping"),
    "tombstone-lifetime": ("tombstone_lifetime", "duration",
                           "duration of time a producer will remain tombstoned if registration remains"),
}
_COERCE: dict[str, Callable[[Any], Any]] = {"string": _string, "duration": _duration, "log_level": _log_level}


def _flag_set(defaults: LookupdOptions) -> FlagSet:
    flags = FlagSet("nsqlookupd")
    flags.add("config", "string", "", "path to config file")
    flags.add("version", "bool", False, "print version string")
    flags.add("verbose", "bool", False, "[deprecated] has no effect, use --log-level")
    for flag, (attr, kind, usage) in _OPTS.items():
        default = getattr(defaults, attr)
        if kind == "log_level":
            flags.add_var(flag, default, usage, lambda text, _cur: parse_level(text),
                          show=lambda v: LEVEL_NAMES.get(v, ""))
        else:
            flags.add(flag, kind, default, usage)  # type: ignore[arg-type]
    return flags


def parse_options(argv: list[str]) -> LookupdOptions:
    """Like nsqlookupd's Start(): flags (usage and exit 2 on errors), `--version` returns at once, then TOML.
    nsqd's ConfigError for an unreadable config file, ResolveError for a TOML value of the wrong kind."""
    opts = LookupdOptions()
    parsed = _flag_set(opts).parse(argv)
    if parsed.values["version"]:
        opts.show_version = True
        return opts
    config = parsed.values["config"]
    cfg = _load_toml(config) if config else {}
    for flag, (attr, kind, _usage) in _OPTS.items():
        if flag in parsed.explicit:
            setattr(opts, attr, parsed.values[flag])
        elif attr in cfg:
            try:
                setattr(opts, attr, _COERCE[kind](cfg[attr]))
            except ValueError as err:
                current = getattr(opts, attr)
                shown = format_duration(current) if kind == "duration" else _go_v(current)
                raise ResolveError(f"ERROR: Resolve failed to coerce value {_go_v(cfg[attr])} ({shown}) "
                                   f"for field {attr} - {err}") from None
    return opts

