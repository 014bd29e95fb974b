"""nsqlookupd's options: Go nsqlookupd's flags, `--config` TOML, and go-options precedence
(a flag given on the command line > the TOML key > the default). Durations are int nanoseconds."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from ..config.options import LOG_LEVEL
from ..go.durations import SECOND
from ..go.settings import BOOL, DURATION, STRING, deprecated_verbose, parse_daemon_options, setting
from ..runtime.log import INFO


@dataclass(slots=True)
class LookupdOptions:
    log_level: int = setting("log-level", LOG_LEVEL, INFO, "set log verbosity: debug, info, warn, error, or fatal")
    log_prefix: str = setting("log-prefix", STRING, "[nsqlookupd] ", "log message prefix")
    tcp_address: str = setting("tcp-address", STRING, "0.0.0.0:4160", "<addr>:<port> to listen on for TCP clients")
    http_address: str = setting("http-address", STRING, "0.0.0.0:4161", "<addr>:<port> to listen on for HTTP clients")
    broadcast_address: str = setting("broadcast-address", STRING, socket.gethostname,
                                     "address of this lookupd node, (default to the OS hostname)")
    inactive_producer_timeout: int = setting("inactive-producer-timeout", DURATION, 300 * SECOND,
                                             "duration of time a producer will remain in the active list since its "
                                             "last ping")
    tombstone_lifetime: int = setting("tombstone-lifetime", DURATION, 45 * SECOND,
                                      "duration of time a producer will remain tombstoned if registration remains")
    config: str = setting("config", STRING, "", "path to config file", key=None)
    show_version: bool = setting("version", BOOL, False, "print version string", key=None)


def parse_options(argv: list[str]) -> LookupdOptions:
    """Like nsqlookupd's Start(): flags (usage and exit 2 on errors), `--version` returns at once, then TOML.
    ConfigError for an unreadable config file or a bad `log_level`, ResolveError for a TOML value of the wrong
    kind (go.settings)."""
    return parse_daemon_options(LookupdOptions(), "nsqlookupd", argv, ("log_level",), deprecated_verbose)
