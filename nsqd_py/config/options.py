"""nsqd's options: defaults, command-line flags, `--config` TOML, precedence and start-up validation.

Precedence follows go-options: a flag given on the command line, else the TOML key, else the default.
Every duration attribute is int nanoseconds. See `parse_options` for which error the caller prints how.
"""

from __future__ import annotations

import hashlib
import socket
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from nsqd_py.config import queue_settings
from nsqd_py.go.durations import HOUR, MILLISECOND, MINUTE, SECOND
from nsqd_py.go.gocompat import go_quote
from nsqd_py.go.goflags import FlagSet, format_float, parse_bool, parse_float
from nsqd_py.go.settings import (
    BOOL,
    DURATION,
    INT,
    LIST,
    STRING,
    ConfigError,
    DaemonOptions,
    OptionKind,
    OptionsError,
    ResolveError,
    coerce_floats,
    deprecated_verbose,
    parse_daemon_options,
    setting,
    settings_of,
    toml_keys,
)
from nsqd_py.runtime.log import INFO, LEVEL_NAMES, Logger, parse_level
from nsqd_py.runtime.version import version_line

TLS_NOT_REQUIRED = 0
TLS_REQUIRED_EXCEPT_HTTP = 1  # "tcp-https": TLS on TCP, plain HTTP allowed
TLS_REQUIRED = 2

TLS_VERSIONS = {"tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303, "tls1.3": 0x0304}
_TLS_NAMES = {code: name for name, code in TLS_VERSIONS.items()}
TOPOLOGY_EXPERIMENT = "topology-aware-consumption"
#: --sigterm's values (beyond nsqd, RFC nsqio/nsq#1302)
CLEAN_SHUTDOWN = "clean-shutdown"
DRAIN = "drain"
EXPERIMENTS = (TOPOLOGY_EXPERIMENT,)

_LEVEL_KEYWORDS = {1: "debug", 2: "info", 3: "warn", 4: "error", 5: "fatal"}


class InstantiateError(OptionsError):
    """A check nsqd makes in `nsqd.New()`, such as `--node-id must be [0,1024)`; printed as
    `[nsqd] <time> FATAL: failed to instantiate nsqd - <text>`."""


def _hostname() -> str:
    return socket.gethostname()


def default_node_id(hostname: str) -> int:
    """nsqd's default `--node-id`: crc32 (IEEE) of the hostname's md5 digest, modulo 1024."""
    return zlib.crc32(hashlib.md5(hostname.encode()).digest()) % 1024


def queue_setting(key: str, kind: OptionKind) -> Any:
    """The option holding a queue control's process-wide default: flag, default and usage from its definition."""
    control = queue_settings.BY_KEY[key]
    return setting(control.flag, kind, control.off, control.usage)


# --- nsqd's own kinds of option: read from text even in TOML (config.Validate()) -----------------------------


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


FLOATS = OptionKind(None, coerce_floats, to_toml=list, setter=_add_percentiles,
                    show=lambda v: ",".join(f"{f:f}" for f in v), zero=[])
# the three below are translated from their text by translate_text_keys before resolving: int() only checks
LOG_LEVEL = OptionKind(None, int, to_toml=_LEVEL_KEYWORDS.__getitem__, setter=_set_log_level,
                       show=lambda v: LEVEL_NAMES.get(v, ""), toml_text=True)
TLS_REQUIRED_KIND = OptionKind(None, int, setter=_set_tls_required, zero=0, is_bool=True, toml_text=True,
                               to_toml=lambda v: "tcp-https" if v == TLS_REQUIRED_EXCEPT_HTTP else v == TLS_REQUIRED)
TLS_MIN_VERSION = OptionKind(None, int, to_toml=_TLS_NAMES.__getitem__, setter=_set_tls_min_version, zero=0,
                             show=lambda v: _TLS_NAMES.get(v, ""), toml_text=True)

#: nsqd's `config.Validate()` order for the keys read from their text form
TEXT_KEYS = ("tls_required", "tls_min_version", "log_level")


@dataclass(slots=True)
class Options:
    """Resolved nsqd options. Durations are int nanoseconds; attribute names follow the TOML keys. The fields are
    in the order of Go's `Options` struct, which go-options resolves in (the first bad TOML value is the one
    reported)."""

    node_id: int = setting("node-id", INT, lambda: default_node_id(_hostname()), "unique part for message IDs, (int) "
        "in range [0,1024) (default is hash of hostname)", key="id", go_field="ID")
    log_level: int = setting("log-level", LOG_LEVEL, INFO, "set log verbosity: debug, info, warn, error, or fatal")
    log_prefix: str = setting("log-prefix", STRING, "[nsqd] ", "log message prefix")

    tcp_address: str = setting("tcp-address", STRING, "0.0.0.0:4150", "address to listen on for TCP clients "
        "(<addr>:<port> for TCP/IP or <path> for unix socket)")
    http_address: str = setting("http-address", STRING, "0.0.0.0:4151", "address to listen on for HTTP clients "
        "(<addr>:<port> for TCP/IP or <path> for unix socket)")
    https_address: str = setting("https-address", STRING, "0.0.0.0:4152", "<addr>:<port> to listen on for HTTPS "
        "clients")
    broadcast_address: str = setting("broadcast-address", STRING, _hostname, "address that will be registered with "
        "lookupd (defaults to the OS hostname)")
    broadcast_tcp_port: int = setting("broadcast-tcp-port", INT, 0, "TCP port that will be registered with lookupd "
        "(defaults to the TCP port that this nsqd is listening on)")
    broadcast_http_port: int = setting("broadcast-http-port", INT, 0, "HTTP port that will be registered with "
        "lookupd (defaults to the HTTP port that this nsqd is listening on)")
    nsqlookupd_tcp_addresses: list[str] = setting("lookupd-tcp-address", LIST, [], "lookupd TCP address (may be "
        "given multiple times)", key="nsqlookupd_tcp_addresses")
    auth_http_addresses: list[str] = setting("auth-http-address", LIST, [], "<addr>:<port> or a full url to query "
        "auth server (may be given multiple times)", key="auth_http_addresses")
    auth_http_request_method: str = setting("auth-http-request-method", STRING, "get",
        "HTTP method to use for auth server requests (get or post)")
    http_client_connect_timeout: int = setting("http-client-connect-timeout", DURATION, 2 * SECOND,
        "timeout for HTTP connect")
    http_client_request_timeout: int = setting("http-client-request-timeout", DURATION, 5 * SECOND,
        "timeout for HTTP request")
    topology_region: str = setting("topology-region", STRING, "", "A region represents a larger domain, typically a "
        "geographical region that contains multiple zones")
    topology_zone: str = setting("topology-zone", STRING, "", "A zone represents a logical failure domain, typically "
        "a datacenter, within a region")

    data_path: str = setting("data-path", STRING, "", "path to store disk-backed messages")
    mem_queue_size: int = setting("mem-queue-size", INT, 10000, "number of messages to keep in memory (per "
        "topic/channel)")
    max_bytes_per_file: int = setting("max-bytes-per-file", INT, 100 * 1024 * 1024, "number of bytes per diskqueue "
        "file before rolling")
    sync_every: int = setting("sync-every", INT, 2500, "number of messages per diskqueue fsync")
    sync_timeout: int = setting("sync-timeout", DURATION, 2 * SECOND, "duration of time per diskqueue fsync")

    queue_scan_selection_count: int = setting("queue-scan-selection-count", INT, 20, "number of channels to check "
        "per cycle (every 100ms) for in-flight and deferred timeouts")
    queue_scan_worker_pool_max: int = setting("queue-scan-worker-pool-max", INT, 4, "max concurrency for checking "
        "in-flight and deferred message timeouts")

    msg_timeout: int = setting("msg-timeout", DURATION, 60 * SECOND, "default duration to wait before auto-requeing "
        "a message")
    max_msg_timeout: int = setting("max-msg-timeout", DURATION, 15 * MINUTE, "maximum duration before a message will "
        "timeout")
    max_msg_size: int = setting("max-msg-size", INT, 1024 * 1024, "maximum size of a single message in bytes")
    max_body_size: int = setting("max-body-size", INT, 5 * 1024 * 1024, "maximum size of a single command body")
    max_req_timeout: int = setting("max-req-timeout", DURATION, 1 * HOUR, "maximum requeuing timeout for a message")

    max_heartbeat_interval: int = setting("max-heartbeat-interval", DURATION, 60 * SECOND,
        "maximum client configurable duration of time between client heartbeats")
    max_rdy_count: int = setting("max-rdy-count", INT, 2500, "maximum RDY count for a client")
    max_output_buffer_size: int = setting("max-output-buffer-size", INT, 64 * 1024, "maximum client configurable "
        "size (in bytes) for a client output buffer")
    max_output_buffer_timeout: int = setting("max-output-buffer-timeout", DURATION, 30 * SECOND,
        "maximum client configurable duration of time between flushing to a client")
    min_output_buffer_timeout: int = setting("min-output-buffer-timeout", DURATION, 25 * MILLISECOND,
        "minimum client configurable duration of time between flushing to a client")
    output_buffer_timeout: int = setting("output-buffer-timeout", DURATION, 250 * MILLISECOND,
        "default duration of time between flushing data to clients")
    max_channel_consumers: int = setting("max-channel-consumers", INT, 0, "maximum channel consumer connection count "
        "per nsqd instance (default 0, i.e., unlimited)")

    statsd_address: str = setting("statsd-address", STRING, "", "UDP <addr>:<port> of a statsd daemon for pushing "
        "stats")
    statsd_prefix: str = setting("statsd-prefix", STRING, "nsq.%s", "prefix used for keys sent to statsd (%s for "
        "host replacement)")
    statsd_interval: int = setting("statsd-interval", DURATION, 60 * SECOND, "duration between pushing to statsd")
    statsd_mem_stats: bool = setting("statsd-mem-stats", BOOL, True, "toggle sending memory and GC stats to statsd")
    statsd_udp_packet_size: int = setting("statsd-udp-packet-size", INT, 508, "the size in bytes of statsd UDP "
        "packets")
    statsd_exclude_ephemeral: bool = setting("statsd-exclude-ephemeral", BOOL, False,
        "Skip ephemeral topics and channels when sending stats to statsd")

    e2e_processing_latency_window_time: int = setting("e2e-processing-latency-window-time", DURATION, 10 * MINUTE,
        "calculate end to end latency quantiles for this duration of time (ie: 60s would only show quantile "
        "calculations from the past 60 seconds)")
    e2e_processing_latency_percentiles: list[float] = setting("e2e-processing-latency-percentile", FLOATS, [],
        "message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma "
        "separated '1.0,0.99,0.95', default none)", key="e2e_processing_latency_percentiles")

    tls_cert: str = setting("tls-cert", STRING, "", "path to certificate file")
    tls_key: str = setting("tls-key", STRING, "", "path to key file")
    tls_client_auth_policy: str = setting("tls-client-auth-policy", STRING, "", "client certificate auth policy "
        "('require' or 'require-verify')")
    tls_root_ca_file: str = setting("tls-root-ca-file", STRING, "", "path to certificate authority file")
    tls_required: int = setting("tls-required", TLS_REQUIRED_KIND, TLS_NOT_REQUIRED,
        "require TLS for client connections (true, false, tcp-https)")
    tls_min_version: int = setting("tls-min-version", TLS_MIN_VERSION, TLS_VERSIONS["tls1.0"],
        "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')")

    deflate: bool = setting("deflate", BOOL, True, "enable deflate feature negotiation (client compression)",
        go_field="DeflateEnabled")
    max_deflate_level: int = setting("max-deflate-level", INT, 6, "max deflate compression level a client can "
        "negotiate (> values == > nsqd CPU usage)")
    snappy: bool = setting("snappy", BOOL, True, "enable snappy feature negotiation (client compression)",
        go_field="SnappyEnabled")
    enable_experiment: list[str] = setting("enable-experiment", LIST, [], "enable experimental feature (may be given "
        "multiple times) (valid options: " + ", ".join(f"'{name}'" for name in EXPERIMENTS) + ")",
        go_field="Experiments")

    # Beyond nsqd: the process-wide defaults of the per-topic and per-channel controls (config/queue_settings.py)
    max_channel_depth: int = queue_setting("max_channel_depth", INT)
    max_channel_bytes: int = queue_setting("max_channel_bytes", INT)
    channel_overflow: str = queue_setting("channel_overflow", STRING)
    msg_ttl: int = queue_setting("msg_ttl", DURATION)
    max_attempts: int = queue_setting("max_attempts", INT)
    dead_letter_topic: str = queue_setting("dead_letter_topic", STRING)
    topic_retention: int = queue_setting("topic_retention", DURATION)
    topic_retention_bytes: int = queue_setting("topic_retention_bytes", INT)
    # Beyond nsqd, process-wide: deferred messages keep their due time on disk (core/disk/deferred_store.py)
    persist_deferred: bool = setting("persist-deferred", BOOL, False, "keep deferred messages (DPUB, REQ with a "
        "delay) on disk with their due time, so restarts and crashes keep it (beyond nsqd)")
    http_auth_required: bool = setting("http-auth-required", BOOL, False, "require 'Authorization: Bearer "
        "<secret>' on the HTTP API, checked against --auth-http-address (/ping and /info stay open) (beyond nsqd)")
    http_admin_identity: str = setting("http-admin-identity", STRING, "", "with --http-auth-required, the auth "
        "server identity allowed /config and /metrics (empty: nobody) (beyond nsqd)")
    sigterm: str = setting("sigterm", STRING, CLEAN_SHUTDOWN, f"what SIGTERM does: {CLEAN_SHUTDOWN} (flush to disk "
        f"and exit) or {DRAIN} (refuse new messages, topics and channels; exit once consumers have the rest)")

    config: str = setting("config", STRING, "", "path to config file", key=None)
    show_version: bool = setting("version", BOOL, False, "print version string", key=None)

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


#: Every TOML key (= every `/config/<key>`) → Options attribute.
CONFIG_KEYS: dict[str, str] = toml_keys(Options)


def toml_defaults(opts: Options | None = None) -> dict[str, Any]:
    """Each TOML key with its value written the way a config file would (`"1m0s"`, `"info"`, `"tls1.0"`)."""
    opts = opts or Options()
    return {meta.key: meta.kind.to_toml(getattr(opts, attr))
            for attr, meta in settings_of(Options) if meta.key is not None}


_Opts = TypeVar("_Opts", bound=DaemonOptions)


def _deprecated_flags(flags: FlagSet) -> None:
    deprecated_verbose(flags)
    flags.add("worker-id", "bool", False, "[deprecated] use --node-id")


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
    if opts.http_auth_required and not opts.auth_http_addresses:
        raise InstantiateError("--http-auth-required needs --auth-http-address")
    for value in opts.e2e_processing_latency_percentiles:
        if value <= 0 or value > 1:  # written like Go's check, so NaN passes as it does there
            raise InstantiateError(f"invalid E2E processing latency percentile: {format_float(value)}")
    if opts.sigterm not in (CLEAN_SHUTDOWN, DRAIN):
        raise InstantiateError(f"--sigterm must be {CLEAN_SHUTDOWN} or {DRAIN}")
    try:
        queue_settings.check_defaults(opts)
    except queue_settings.SettingError as err:
        raise InstantiateError(str(err)) from None


def parse_options(argv: list[str]) -> Options:
    """Flags, then `--config` TOML, then nsqd's checks. `argv` excludes the program name (`sys.argv[1:]`).

    Command-line errors print Go's message and usage to stderr and raise SystemExit(2); `-h` raises
    SystemExit(0). With `--version` the Options come back at once (`show_version` set, nothing else
    resolved or checked), as nsqd prints its version before reading the config. Other failures raise an
    `OptionsError` subclass; its docstring says how the caller prints each before exiting 1.
    """
    opts = parse_daemon_options(Options(), "nsqd", argv, TEXT_KEYS, _deprecated_flags)
    if not opts.show_version:
        validate(opts)
    return opts


def options_or_exit(argv: list[str]) -> Options:
    """nsqd's `parse_options` for an executable (`parsed_or_exit`)."""
    return parsed_or_exit(parse_options, argv, "nsqd")


def parsed_or_exit(parse: Callable[[list[str]], _Opts], argv: list[str], daemon: str) -> _Opts:
    """``parse`` (nsqd's `parse_options` or nsqlookupd's) for an executable: on a bad flag or config, the daemon's
    message and exit status 1 (usage errors already exited 2); `--version` prints its version line and exits 0."""
    logger = Logger(f"[{daemon}] ")
    try:
        opts = parse(argv)
    except ConfigError as err:
        logger.fatal(str(err))
        sys.exit(1)
    except ResolveError as err:  # Go's plain log.Fatalf: no prefix, no level
        print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {err}", file=sys.stderr)
        sys.exit(1)
    except OptionsError as err:
        logger.fatal(f"failed to instantiate {daemon} - {err}")
        sys.exit(1)
    if opts.show_version:
        print(version_line(daemon))
        sys.exit(0)
    return opts
