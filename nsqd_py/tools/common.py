"""Bits every tool shares: Go's `log.Fatal`, go-nsq-style log lines, the user agent, the consuming tools'
source flags (`SourceOptions`), and `--consumer-opt`/`--producer-opt key,value` parsing."""

from __future__ import annotations

import os
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from ..go.durations import MILLISECOND, SECOND, parse_duration
from ..go.goflags import parse_bool, parse_int
from ..go.settings import BOOL, DURATION, INT, LIST, parse_flags, setting
from ..runtime.log import DEBUG, ERROR, FATAL, INFO, WARN
from ..runtime.version import NSQ_VERSION, PY_VERSION, version_line


def tool_main(parse_options: Callable[[list[str]], Any], run: Callable[[Any], object]) -> Callable[..., None]:
    """The `main` of a tool's executable: parse its flags (None means nothing to run, e.g. --version),
    then run it."""

    def main(argv: list[str] | None = None) -> None:
        opts = parse_options(sys.argv[1:] if argv is None else argv)
        if opts is not None:
            run(opts)

    return main


def log_printf(msg: str) -> None:
    """Go's standard `log.Printf`: `2026/11/22 06:39:26 <msg>` on stderr."""
    print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def go_dial_error(address: str, err: BaseException) -> str:
    """What Go prints for a failed dial (`dial tcp 127.0.0.1:4150: connect: connection refused`), from the OSError
    behind ``err``; other errors as they are."""
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__
    if cause is None:
        return str(err)
    network = "unix" if "/" in address else "tcp"
    if isinstance(cause, TimeoutError) or cause.errno is None:
        return f"dial {network} {address}: i/o timeout"
    text = os.strerror(cause.errno)
    return f"dial {network} {address}: connect: {text[:1].lower()}{text[1:]}"


def log_fatal(msg: str) -> NoReturn:
    """Go's `log.Fatal`: a `log_printf` line, then exit status 1."""
    log_printf(msg)
    raise SystemExit(1)


def user_agent(app: str) -> str:
    return f"{app}/{NSQ_VERSION} nsqd_py.client/{PY_VERSION}"


_GONSQ_LEVELS = {DEBUG: "DBG", INFO: "INF", WARN: "WRN", ERROR: "ERR", FATAL: "ERR"}


def gonsq_log(consumer_id: int = 1, level: int = INFO) -> Callable[[int, str], None]:
    """A client log function printing go-nsq's default lines: `2026/11/22 06:39:26 INF    1 [t/c] text`."""

    def log(lvl: int, msg: str) -> None:
        if lvl >= level:
            stamp = time.strftime("%Y/%m/%d %H:%M:%S")
            print(f"{stamp} {_GONSQ_LEVELS[lvl]:<4s}{consumer_id:>4d} {msg}", file=sys.stderr, flush=True)

    return log


_IDENTIFY_STR = {"client_id", "hostname", "user_agent"}
_IDENTIFY_INT = {"output_buffer_size", "sample_rate", "deflate_level"}
_IDENTIFY_MS = {"heartbeat_interval", "msg_timeout", "output_buffer_timeout"}
_IDENTIFY_BOOL = {"tls_v1", "snappy", "deflate"}


@dataclass
class ClientSettings:
    """What `--consumer-opt`/`--producer-opt` can change (the go-nsq Config names this client implements)."""

    identify: dict[str, Any] = field(default_factory=dict)
    max_in_flight: int | None = None
    lookupd_poll_interval: float = 60.0
    #: go-nsq's requeue delay for a failed message: attempts x default, at most max (seconds)
    default_requeue_delay: float = 90.0
    max_requeue_delay: float = 900.0
    timeout: float = 5.0
    tls_root_ca_file: str = ""
    tls_insecure_skip_verify: bool = False
    tls_cert: str = ""
    tls_key: str = ""

    def set(self, opt: str) -> None:
        """go-nsq's ConfigFlag: `key,value`, or a bare `key` meaning true; ValueError for anything else."""
        key, sep, value = opt.partition(",")
        value = value if sep else "true"
        if key in _IDENTIFY_STR:
            self.identify[key] = value
        elif key in _IDENTIFY_INT:
            self.identify[key] = parse_int(value)
        elif key in _IDENTIFY_MS:
            self.identify[key] = parse_duration(value) // MILLISECOND
        elif key in _IDENTIFY_BOOL:
            self.identify[key] = parse_bool(value)
        elif key == "max_in_flight":
            self.max_in_flight = parse_int(value)
        elif key == "lookupd_poll_interval":
            self.lookupd_poll_interval = parse_duration(value) / SECOND
        elif key in ("default_requeue_delay", "max_requeue_delay"):
            setattr(self, key, parse_duration(value) / SECOND)
        elif key == "dial_timeout":
            self.timeout = parse_duration(value) / SECOND
        elif key in ("tls_root_ca_file", "tls_cert", "tls_key"):
            setattr(self, key, value)
        elif key == "tls_insecure_skip_verify":
            self.tls_insecure_skip_verify = parse_bool(value)
        else:
            raise ValueError(f"invalid option {key}")

    def tls_context(self) -> ssl.SSLContext | None:
        """A client context when any TLS option was given (tls_v1 alone uses the system CAs)."""
        if not (self.identify.get("tls_v1") or self.tls_root_ca_file or self.tls_cert):
            return None
        context = ssl.create_default_context(cafile=self.tls_root_ca_file or None)
        if self.tls_insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key or None)
        return context


def client_settings(opts: list[str]) -> ClientSettings:
    settings = ClientSettings()
    for opt in opts:
        settings.set(opt)
    return settings


_GONSQ_CONFIG = "http://godoc.org/github.com/nsqio/go-nsq#Config"
CONSUMER_OPT_USAGE = f"option to passthrough to nsq.Consumer (may be given multiple times, {_GONSQ_CONFIG})"
PRODUCER_OPT_USAGE = f"option to passthrough to nsq.Producer (may be given multiple times, {_GONSQ_CONFIG})"


@dataclass
class SourceOptions:
    """The flags of every consuming tool: where it reads (nsqd or lookupd, topics) and go-nsq Consumer options.
    A tool's options class extends it; redeclaring a field changes its default or help, as the Go tool words it."""

    version: bool = setting("version", BOOL, False, "print version string")
    topics: list[str] = setting("topic", LIST, [], "nsq topic (may be given multiple times)")
    nsqd_tcp_addresses: list[str] = setting("nsqd-tcp-address", LIST, [],
                                            "nsqd TCP address (may be given multiple times)")
    lookupd_http_addresses: list[str] = setting("lookupd-http-address", LIST, [],
                                                "lookupd HTTP address (may be given multiple times)")
    max_in_flight: int = setting("max-in-flight", INT, 200, "max number of messages to allow in flight")
    consumer_opts: list[str] = setting("consumer-opt", LIST, [], CONSUMER_OPT_USAGE)
    #: the parsed `consumer_opts` (`read_client_settings`)
    consumer: ClientSettings = field(default_factory=ClientSettings)

    def check_one_source(self, missing_end: str = "") -> None:
        """Exactly one kind of source must be given, else the Go tool's fatal line (``missing_end``: nsq_to_file's
        ends its first one in a period)."""
        if not self.nsqd_tcp_addresses and not self.lookupd_http_addresses:
            log_fatal(f"--nsqd-tcp-address or --lookupd-http-address required{missing_end}")
        if self.nsqd_tcp_addresses and self.lookupd_http_addresses:
            log_fatal("use --nsqd-tcp-address or --lookupd-http-address not both")


_Options = TypeVar("_Options")


def parse_tool_flags(cls: type[_Options], app: str, argv: Sequence[str]) -> _Options:
    """A tool's options from its command line (Go's `flag.Parse`: usage and exit 2 on a bad flag)."""
    opts: _Options = parse_flags(cls, app, argv)[0]
    return opts


def printed_version(version: bool, app: str) -> bool:
    """`--version`: print the tool's version line; True when it did (the tool then runs nothing)."""
    if version:
        print(version_line(app))
    return version


def read_client_settings(opts: list[str], error_prefix: str) -> ClientSettings:
    """`--consumer-opt`/`--producer-opt` values, or the tool's fatal line (``error_prefix`` - reason)."""
    try:
        return client_settings(opts)
    except ValueError as err:
        log_fatal(f"{error_prefix} - {err}")


@dataclass
class HTTPTimeoutOptions:
    """The HTTP client timeouts of the tools that call nsqd's or lookupd's HTTP API."""

    http_client_connect_timeout: int = setting("http-client-connect-timeout", DURATION, 2 * SECOND,
                                               "timeout for HTTP connect")
    http_client_request_timeout: int = setting("http-client-request-timeout", DURATION, 5 * SECOND,
                                               "timeout for HTTP request")

    @property
    def http_timeout(self) -> tuple[float, float]:
        """(connect, read) seconds."""
        return self.http_client_connect_timeout / SECOND, self.http_client_request_timeout / SECOND

    def check_http_timeouts(self) -> None:
        if self.http_client_connect_timeout <= 0:
            log_fatal("--http-client-connect-timeout should be positive")
        if self.http_client_request_timeout <= 0:
            log_fatal("--http-client-request-timeout should be positive")
