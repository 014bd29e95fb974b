"""nsqd's options: defaults, command-line flags, `--config` TOML, precedence and start-up validation.

Precedence follows go-options: a flag given on the command line, else the TOML key, else the default.
Every duration attribute is int nanoseconds. See `parse_options` for which error the caller prints how.
"""

from __future__ import annotations

import datetime
import hashlib
import socket
import sys
import time
import tomllib
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nsqd_py.go.durations import HOUR, MILLISECOND, MINUTE, SECOND, format_duration, parse_duration
from nsqd_py.go.gocompat import go_quote
from nsqd_py.go.goflags import FlagSet, Kind, Setter, format_float, parse_bool, parse_float, parse_int
from nsqd_py.runtime.log import INFO, LEVEL_NAMES, Logger, parse_level
from nsqd_py.runtime.version import version_line

TLS_NOT_REQUIRED = 0
TLS_REQUIRED_EXCEPT_HTTP = 1  # "tcp-https": TLS on TCP, plain HTTP allowed
TLS_REQUIRED = 2

TLS_VERSIONS = {"tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303, "tls1.3": 0x0304}
_TLS_NAMES = {code: name for name, code in TLS_VERSIONS.items()}
TOPOLOGY_EXPERIMENT = "topology-aware-consumption"
EXPERIMENTS = (TOPOLOGY_EXPERIMENT,)

_LEVEL_KEYWORDS = {1: "debug", 2: "info", 3: "warn", 4: "error", 5: "fatal"}


class OptionsError(Exception):
    """Start-up option problem; nsqd exits 1. `str(err)` is Go's text without any log prefix.

    How the caller prints it depends on the subclass:
    * `ConfigError`: `[nsqd] <time> FATAL: <text>` (nsqd's logFatal), e.g. `failed to load config file ...`.
    * `InstantiateError`: `[nsqd] <time> FATAL: failed to instantiate nsqd - <text>`.
    * `ResolveError`: Go's bare standard logger, `2006/01/02 15:04:05 <text>`, no prefix and no level.
    """


class ConfigError(OptionsError):
    """The TOML file cannot be read or one of its special keys is invalid."""


class InstantiateError(OptionsError):
    """A check nsqd makes in `nsqd.New()`, such as `--node-id must be [0,1024)`."""


class ResolveError(OptionsError):
    """A value Go rejects with `log.Fatalf` (go-options coercion, an unparsable percentile flag)."""


def _hostname() -> str:
    return socket.gethostname()


def default_node_id(hostname: str) -> int:
    """nsqd's default `--node-id`: crc32 (IEEE) of the hostname's md5 digest, modulo 1024."""
    return zlib.crc32(hashlib.md5(hostname.encode()).digest()) % 1024


@dataclass(slots=True)
class Options:
    """Resolved nsqd options. Durations are int nanoseconds; attribute names follow the TOML keys."""

    node_id: int = field(default_factory=lambda: default_node_id(_hostname()))
    log_level: int = INFO
    log_prefix: str = "[nsqd] "

    tcp_address: str = "0.0.0.0:4150"
    http_address: str = "0.0.0.0:4151"
    https_address: str = "0.0.0.0:4152"
    broadcast_address: str = field(default_factory=_hostname)
    broadcast_tcp_port: int = 0
    broadcast_http_port: int = 0
    nsqlookupd_tcp_addresses: list[str] = field(default_factory=list)
    auth_http_addresses: list[str] = field(default_factory=list)
    auth_http_request_method: str = "get"
    http_client_connect_timeout: int = 2 * SECOND
    http_client_request_timeout: int = 5 * SECOND
    topology_region: str = ""
    topology_zone: str = ""
    enable_experiment: list[str] = field(default_factory=list)

    data_path: str = ""
    mem_queue_size: int = 10000
    max_bytes_per_file: int = 100 * 1024 * 1024
    sync_every: int = 2500
    sync_timeout: int = 2 * SECOND

    queue_scan_worker_pool_max: int = 4
    queue_scan_selection_count: int = 20

    msg_timeout: int = 60 * SECOND
    max_msg_timeout: int = 15 * MINUTE
    max_msg_size: int = 1024 * 1024
    max_body_size: int = 5 * 1024 * 1024
    max_req_timeout: int = 1 * HOUR

    max_heartbeat_interval: int = 60 * SECOND
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 64 * 1024
    max_output_buffer_timeout: int = 30 * SECOND
    min_output_buffer_timeout: int = 25 * MILLISECOND
    output_buffer_timeout: int = 250 * MILLISECOND
    max_channel_consumers: int = 0

    statsd_address: str = ""
    statsd_prefix: str = "nsq.%s"
    statsd_interval: int = 60 * SECOND
    statsd_mem_stats: bool = True
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False

    e2e_processing_latency_percentiles: list[float] = field(default_factory=list)
    e2e_processing_latency_window_time: int = 10 * MINUTE

    tls_cert: str = ""
    tls_key: str = ""
    tls_root_ca_file: str = ""
    tls_client_auth_policy: str = ""
    tls_required: int = TLS_NOT_REQUIRED
    tls_min_version: int = TLS_VERSIONS["tls1.0"]

    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True

    config: str = ""
    show_version: bool = False

    # Fixed in nsqd (no flag, no TOML key, not in /config); tests may shorten them.
    client_timeout: int = 60 * SECOND
    queue_scan_interval: int = 100 * MILLISECOND
    queue_scan_dirty_percent: float = 0.25

    def to_config_value(self, key: str) -> Any:
        """The JSON-able value `GET /config/<key>` returns; KeyError for anything that is not a TOML key.

        `statsd_prefix` and the broadcast ports are only final after `apply_listen_ports`.
        """
        value = getattr(self, CONFIG_KEYS[key])
        return list(value) if isinstance(value, list) else value

    def apply_listen_ports(self, tcp_port: int | None, http_port: int | None) -> None:
        """Finish the options once the listeners are bound, as `nsqd.New()` does.

        Broadcast ports left at 0 take the real ports (pass None for a unix socket or a disabled HTTP
        listener, which leaves 0), then `%s` in `statsd_prefix` becomes the statsd host key.
        """
        if self.broadcast_http_port == 0 and http_port is not None:
            self.broadcast_http_port = http_port
        if self.broadcast_tcp_port == 0 and tcp_port is not None:
            self.broadcast_tcp_port = tcp_port
        if self.statsd_prefix:
            self.statsd_prefix = expand_statsd_prefix(self.statsd_prefix, self.broadcast_address,
                                                      self.broadcast_http_port)


def expand_statsd_prefix(prefix: str, broadcast_address: str, http_port: int) -> str:
    """`nsq.%s` → `nsq.vm_4151.`: host key is `host:port` with `.` and `:` as `_`, and a `.` is appended."""
    host = f"[{broadcast_address}]" if ":" in broadcast_address else broadcast_address
    key = f"{host}:{http_port}".replace(".", "_").replace(":", "_")
    expanded = prefix.replace("%s", key)
    return expanded if expanded.endswith(".") else expanded + "."


# --- option kinds ----------------------------------------------------------------------------------------------
# One object per kind of option, like gunicorn's Setting: how its flag is defined, how a TOML value becomes the
# attribute, how the attribute is written back as TOML.


def _go_type(value: Any) -> str:
    names = {bool: "bool", int: "int64", float: "float64", str: "string", list: "[]interface {}",
             dict: "map[string]interface {}", datetime.datetime: "time.Time"}
    return names.get(type(value), type(value).__name__)


def _go_v(value: Any) -> str:
    """Go's `%v` for a decoded TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, list):
        return "[" + " ".join(_go_v(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_v(value[k])}" for k in sorted(value)) + "]"
    return str(value)



def _set_log_level(text: str, _current: Any) -> int:
    return parse_level(text)


def _set_tls_required(text: str, _current: Any) -> int:
    text = text.lower()
    if text == "tcp-https":
        return TLS_REQUIRED_EXCEPT_HTTP
    return TLS_REQUIRED if parse_bool(text) else TLS_NOT_REQUIRED


def _set_tls_min_version(text: str, current: Any) -> int:
    text = text.lower()
    if not text:
        return current
    try:
        return TLS_VERSIONS[text]
    except KeyError:
        raise ValueError(f"unknown tlsVersionOption {go_quote(text)}") from None


def _add_percentiles(text: str, current: Any) -> list[float]:
    """Comma list, accumulated and kept sorted high to low like nsq's FloatArray; junk is fatal (exit 1)."""
    values = list(current)
    for part in text.split(","):
        try:
            values.append(parse_float(part))
        except ValueError:
            raise ResolveError(f"Could not parse: {part}") from None
    return sorted(values, reverse=True)



def _coerce_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    return f"%!s({_go_type(value)}={_go_v(value)})"  # Go's fmt.Sprintf("%s", v) on a non-string


def _coerce_int(value: Any) -> int:
    if isinstance(value, str):
        return parse_int(value, 10)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"invalid int64 value type {_go_type(value)}")


def _coerce_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return parse_bool(value)
    if isinstance(value, int):
        return value == 0  # go-options quirk: a TOML integer reads inverted (0 → true, 1 → false)
    raise ValueError(f"invalid bool value type {_go_type(value)}")


def _coerce_duration(value: Any) -> int:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value * MILLISECOND  # bare TOML integers are milliseconds
    raise ValueError(f"invalid time.Duration value type {_go_type(value)}")


def _coerce_strings(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else []
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"invalid value type {_go_type(value)}")
    return [item.strip() for item in items if item.strip()]


def _coerce_floats(value: Any) -> list[float]:
    if isinstance(value, str):
        return [parse_float(part.strip()) for part in value.split(",")]
    if isinstance(value, list):
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
            raise ValueError(f"invalid value type {_go_type(value)}")
        return [float(v) for v in value]
    return []



def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class _Kind:
    #: goflags' built-in kind of the flag; None for a custom flag read by `setter`
    builtin: Kind | None
    from_toml: Callable[[Any], Any]
    to_toml: Callable[[Any], Any] = _same
    #: a custom flag's `setter(text, current)`; for `toml_text` kinds it also reads the TOML value's text
    setter: Setter | None = None
    show: Callable[[Any], str] = str
    zero: Any = None
    is_bool: bool = False
    #: nsqd's `config.Validate()` parses the TOML value from its text form (with `setter`) before resolving
    toml_text: bool = False
    #: the current value as go-options shows it in a coercion error
    shown: Callable[[Any], str] = _go_v

    def define(self, flags: FlagSet, name: str, default: Any, usage: str) -> None:
        default = list(default) if isinstance(default, list) else default  # the flag never shares Options' list
        if self.builtin is not None:
            flags.add(name, self.builtin, default, usage)
        else:
            assert self.setter is not None
            flags.add_var(name, default, usage, self.setter, show=self.show, zero=self.zero, is_bool=self.is_bool)


_STRING = _Kind("string", _coerce_string)
_INT = _Kind("int", _coerce_int)
_BOOL = _Kind("bool", _coerce_bool)
_DURATION = _Kind("duration", _coerce_duration, to_toml=format_duration, shown=format_duration)
_LIST = _Kind("list", _coerce_strings, to_toml=list)
_FLOATS = _Kind(None, _coerce_floats, to_toml=list, setter=_add_percentiles,
               show=lambda v: ",".join(f"{f:f}" for f in v), zero=[])
# the three below are translated from their text by _translate_text_keys before resolving: int() only checks
_LOG_LEVEL = _Kind(None, int, to_toml=_LEVEL_KEYWORDS.__getitem__, setter=_set_log_level,
                  show=lambda v: LEVEL_NAMES.get(v, ""), toml_text=True)
_TLS_REQUIRED = _Kind(None, int, setter=_set_tls_required, zero=0, is_bool=True, toml_text=True,
                      to_toml=lambda v: "tcp-https" if v == TLS_REQUIRED_EXCEPT_HTTP else v == TLS_REQUIRED)
_TLS_MIN_VERSION = _Kind(None, int, to_toml=_TLS_NAMES.__getitem__, setter=_set_tls_min_version, zero=0,
                        show=lambda v: _TLS_NAMES.get(v, ""), toml_text=True)


# --- option table --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Opt:
    attr: str
    flag: str
    kind: _Kind
    usage: str
    key: str = ""  # TOML key when it is not the flag name with "-" → "_"

    @property
    def toml_key(self) -> str:
        return self.key or self.flag.replace("-", "_")


_OPTS = (
    _Opt("log_level", "log-level", _LOG_LEVEL, "set log verbosity: debug, info, warn, error, or fatal"),
    _Opt("log_prefix", "log-prefix", _STRING, "log message prefix"),
    _Opt("node_id", "node-id", _INT,
         "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)", "id"),
    _Opt("https_address", "https-address", _STRING, "<addr>:<port> to listen on for HTTPS clients"),
    _Opt("http_address", "http-address", _STRING,
         "address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket)"),
    _Opt("tcp_address", "tcp-address", _STRING,
         "address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)"),
    _Opt("auth_http_addresses", "auth-http-address", _LIST,
         "<addr>:<port> or a full url to query auth server (may be given multiple times)", "auth_http_addresses"),
    _Opt("auth_http_request_method", "auth-http-request-method", _STRING,
         "HTTP method to use for auth server requests (get or post)"),
    _Opt("broadcast_address", "broadcast-address", _STRING,
         "address that will be registered with lookupd (defaults to the OS hostname)"),
    _Opt("broadcast_tcp_port", "broadcast-tcp-port", _INT,
         "TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening on)"),
    _Opt("broadcast_http_port", "broadcast-http-port", _INT,
         "HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening on)"),
    _Opt("nsqlookupd_tcp_addresses", "lookupd-tcp-address", _LIST,
         "lookupd TCP address (may be given multiple times)", "nsqlookupd_tcp_addresses"),
    _Opt("http_client_connect_timeout", "http-client-connect-timeout", _DURATION, "timeout for HTTP connect"),
    _Opt("http_client_request_timeout", "http-client-request-timeout", _DURATION, "timeout for HTTP request"),
    _Opt("topology_region", "topology-region", _STRING,
         "A region represents a larger domain, typically a geographical region that contains multiple zones"),
    _Opt("topology_zone", "topology-zone", _STRING,
         "A zone represents a logical failure domain, typically a datacenter, within a region"),
    _Opt("data_path", "data-path", _STRING, "path to store disk-backed messages"),
    _Opt("mem_queue_size", "mem-queue-size", _INT, "number of messages to keep in memory (per topic/channel)"),
    _Opt("max_bytes_per_file", "max-bytes-per-file", _INT, "number of bytes per diskqueue file before rolling"),
    _Opt("sync_every", "sync-every", _INT, "number of messages per diskqueue fsync"),
    _Opt("sync_timeout", "sync-timeout", _DURATION, "duration of time per diskqueue fsync"),
    _Opt("queue_scan_worker_pool_max", "queue-scan-worker-pool-max", _INT,
         "max concurrency for checking in-flight and deferred message timeouts"),
    _Opt("queue_scan_selection_count", "queue-scan-selection-count", _INT,
         "number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts"),
    _Opt("msg_timeout", "msg-timeout", _DURATION, "default duration to wait before auto-requeing a message"),
    _Opt("max_msg_timeout", "max-msg-timeout", _DURATION, "maximum duration before a message will timeout"),
    _Opt("max_msg_size", "max-msg-size", _INT, "maximum size of a single message in bytes"),
    _Opt("max_req_timeout", "max-req-timeout", _DURATION, "maximum requeuing timeout for a message"),
    _Opt("max_body_size", "max-body-size", _INT, "maximum size of a single command body"),
    _Opt("max_heartbeat_interval", "max-heartbeat-interval", _DURATION,
         "maximum client configurable duration of time between client heartbeats"),
    _Opt("max_rdy_count", "max-rdy-count", _INT, "maximum RDY count for a client"),
    _Opt("max_output_buffer_size", "max-output-buffer-size", _INT,
         "maximum client configurable size (in bytes) for a client output buffer"),
    _Opt("max_output_buffer_timeout", "max-output-buffer-timeout", _DURATION,
         "maximum client configurable duration of time between flushing to a client"),
    _Opt("min_output_buffer_timeout", "min-output-buffer-timeout", _DURATION,
         "minimum client configurable duration of time between flushing to a client"),
    _Opt("output_buffer_timeout", "output-buffer-timeout", _DURATION,
         "default duration of time between flushing data to clients"),
    _Opt("max_channel_consumers", "max-channel-consumers", _INT,
         "maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)"),
    _Opt("statsd_address", "statsd-address", _STRING, "UDP <addr>:<port> of a statsd daemon for pushing stats"),
    _Opt("statsd_interval", "statsd-interval", _DURATION, "duration between pushing to statsd"),
    _Opt("statsd_mem_stats", "statsd-mem-stats", _BOOL, "toggle sending memory and GC stats to statsd"),
    _Opt("statsd_prefix", "statsd-prefix", _STRING, "prefix used for keys sent to statsd (%s for host replacement)"),
    _Opt("statsd_udp_packet_size", "statsd-udp-packet-size", _INT, "the size in bytes of statsd UDP packets"),
    _Opt("statsd_exclude_ephemeral", "statsd-exclude-ephemeral", _BOOL,
         "Skip ephemeral topics and channels when sending stats to statsd"),
    _Opt("e2e_processing_latency_percentiles", "e2e-processing-latency-percentile", _FLOATS,
         "message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or "
         "comma separated '1.0,0.99,0.95', default none)", "e2e_processing_latency_percentiles"),
    _Opt("e2e_processing_latency_window_time", "e2e-processing-latency-window-time", _DURATION,
         "calculate end to end latency quantiles for this duration of time (ie: 60s would only show quantile "
         "calculations from the past 60 seconds)"),
    _Opt("tls_cert", "tls-cert", _STRING, "path to certificate file"),
    _Opt("tls_key", "tls-key", _STRING, "path to key file"),
    _Opt("tls_client_auth_policy", "tls-client-auth-policy", _STRING,
         "client certificate auth policy ('require' or 'require-verify')"),
    _Opt("tls_root_ca_file", "tls-root-ca-file", _STRING, "path to certificate authority file"),
    _Opt("tls_required", "tls-required", _TLS_REQUIRED,
         "require TLS for client connections (true, false, tcp-https)"),
    _Opt("tls_min_version", "tls-min-version", _TLS_MIN_VERSION,
         "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')"),
    _Opt("deflate", "deflate", _BOOL, "enable deflate feature negotiation (client compression)"),
    _Opt("max_deflate_level", "max-deflate-level", _INT,
         "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)"),
    _Opt("snappy", "snappy", _BOOL, "enable snappy feature negotiation (client compression)"),
    _Opt("enable_experiment", "enable-experiment", _LIST,
         "enable experimental feature (may be given multiple times) (valid options: "
         + ", ".join(f"'{name}'" for name in EXPERIMENTS) + ")", "enable_experiment"),
)

#: Every TOML key (= every `/config/<key>`) → Options attribute.
CONFIG_KEYS: dict[str, str] = {opt.toml_key: opt.attr for opt in _OPTS}
_OPTS_BY_KEY = {opt.toml_key: opt for opt in _OPTS}


def toml_defaults(opts: Options | None = None) -> dict[str, Any]:
    """Each TOML key with its value written the way a config file would (`"1m0s"`, `"info"`, `"tls1.0"`)."""
    opts = opts or Options()
    return {opt.toml_key: opt.kind.to_toml(getattr(opts, opt.attr)) for opt in _OPTS}


# --- command line ----------------------------------------------------------------------------------------------


def _flag_set(defaults: Options) -> FlagSet:
    flags = FlagSet("nsqd")
    flags.add("version", "bool", False, "print version string")
    flags.add("config", "string", "", "path to config file")
    flags.add("verbose", "bool", False, "[deprecated] has no effect, use --log-level")
    flags.add("worker-id", "bool", False, "[deprecated] use --node-id")
    for opt in _OPTS:
        opt.kind.define(flags, opt.flag, getattr(defaults, opt.attr), opt.usage)
    return flags


# --- TOML ------------------------------------------------------------------------------------------------------


def _load_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except IsADirectoryError:
        raise ConfigError(f"failed to load config file {path} - read {path}: is a directory") from None
    except OSError as err:
        reason = err.strerror or str(err)
        reason = reason[:1].lower() + reason[1:]
        raise ConfigError(f"failed to load config file {path} - open {path}: {reason}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"failed to load config file {path} - {err}") from None



#: nsqd's `config.Validate()` order for the keys read from their text form
_TEXT_KEYS = ("tls_required", "tls_min_version", "log_level")


def _translate_text_keys(cfg: dict[str, Any]) -> None:
    """nsqd's `config.Validate()`: these keys are parsed from their text form first; junk is fatal."""
    for key in _TEXT_KEYS:
        if key not in cfg:
            continue
        setter = _OPTS_BY_KEY[key].kind.setter
        assert setter is not None
        try:
            parsed = setter(_go_v(cfg[key]), None)
        except ValueError:
            raise ConfigError(f"failed parsing {key} {_go_v(cfg[key])}") from None
        if parsed is None:  # tls_min_version = "" means "keep the flag/default"
            del cfg[key]
        else:
            cfg[key] = parsed


def _coerce(opt: _Opt, value: Any, current: Any) -> Any:
    try:
        return opt.kind.from_toml(value)
    except ValueError as err:
        raise ResolveError(f"ERROR: Resolve failed to coerce value {_go_v(value)} ({opt.kind.shown(current)}) "
                           f"for field {opt.toml_key} - {err}") from None


# --- nsqd.New() checks ----------------------------------------------------------------------------------------


def validate(opts: Options) -> None:
    """The option checks of `nsqd.New()`, in its order; raises InstantiateError. Forces TLS when a client auth
    policy is set. (Loading the TLS key pair is left to the TLS code: `failed to build TLS config - ...`.)"""
    if not 1 <= opts.max_deflate_level <= 9:
        raise InstantiateError("--max-deflate-level must be [1,9]")
    if not 0 <= opts.node_id < 1024:
        raise InstantiateError("--node-id must be [0,1024)")
    if opts.tls_client_auth_policy and opts.tls_required == TLS_NOT_REQUIRED:
        opts.tls_required = TLS_REQUIRED
    if not opts.tls_cert and not opts.tls_key and opts.tls_required != TLS_NOT_REQUIRED:
        raise InstantiateError("cannot require TLS client connections without TLS key and cert")
    if opts.auth_http_request_method not in ("post", "get"):
        raise InstantiateError("--auth-http-request-method must be post or get")
    for value in opts.e2e_processing_latency_percentiles:
        if value <= 0 or value > 1:  # written like Go's check, so NaN passes as it does there
            raise InstantiateError(f"invalid E2E processing latency percentile: {format_float(value)}")


def parse_options(argv: list[str]) -> Options:
    """Flags, then `--config` TOML, then nsqd's checks. `argv` excludes the program name (`sys.argv[1:]`).

    Command-line errors print Go's message and usage to stderr and raise SystemExit(2); `-h` raises
    SystemExit(0). With `--version` the Options come back at once (`show_version` set, nothing else
    resolved or checked), as nsqd prints its version before reading the config. Other failures raise an
    `OptionsError` subclass; its docstring says how the caller prints each before exiting 1.
    """
    opts = Options()
    parsed = _flag_set(opts).parse(argv)
    if parsed.values["version"]:
        opts.show_version = True
        return opts
    opts.config = parsed.values["config"]
    cfg = _load_toml(opts.config) if opts.config else {}
    _translate_text_keys(cfg)
    for opt in _OPTS:
        if opt.flag in parsed.explicit:
            setattr(opts, opt.attr, parsed.values[opt.flag])
        elif opt.toml_key in cfg:
            setattr(opts, opt.attr, _coerce(opt, cfg[opt.toml_key], getattr(opts, opt.attr)))
    validate(opts)
    return opts


def options_or_exit(argv: list[str]) -> Options:
    """`parse_options` for an executable: on a bad flag or config, nsqd's message and exit status 1
    (usage errors already exited 2); `--version` prints nsqd's version line and exits 0."""
    try:
        opts = parse_options(argv)
    except ConfigError as err:
        Logger().fatal(str(err))
        sys.exit(1)
    except ResolveError as err:  # Go's plain log.Fatalf: no prefix, no level
        print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {err}", file=sys.stderr)
        sys.exit(1)
    except OptionsError as err:
        Logger().fatal(f"failed to instantiate nsqd - {err}")
        sys.exit(1)
    if opts.show_version:
        print(version_line())
        sys.exit(0)
    return opts
