"""Bits every tool shares: Go's `log.Fatal`, go-nsq-style log lines, the user agent, the consuming tools'
source flags, and `--consumer-opt`/`--producer-opt key,value` parsing."""

from __future__ import annotations

import os
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..go.durations import MILLISECOND, SECOND, parse_duration
from ..go.goflags import FlagSet, parse_bool, parse_int
from ..runtime.log import DEBUG, ERROR, FATAL, INFO, WARN
from ..runtime.version import NSQ_VERSION, PY_VERSION


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


def one_source(values: dict[str, Any], missing_end: str = "") -> tuple[list[str], list[str]]:
    """The nsqd and lookupd addresses of a consuming tool: exactly one kind must be given, else the Go tool's
    fatal line (``missing_end``: nsq_to_file's ends its first one in a period)."""
    nsqds, lookupds = values["nsqd-tcp-address"], values["lookupd-http-address"]
    if not nsqds and not lookupds:
        log_fatal(f"--nsqd-tcp-address or --lookupd-http-address required{missing_end}")
    if nsqds and lookupds:
        log_fatal("use --nsqd-tcp-address or --lookupd-http-address not both")
    return nsqds, lookupds


def add_source_flags(fs: FlagSet, topic_help: str) -> None:
    """Where a consuming tool reads from: nsqd or lookupd addresses, topics, and go-nsq Consumer options
    (``topic_help`` as the Go tool words it)."""
    fs.add("nsqd-tcp-address", "list", [], "nsqd TCP address (may be given multiple times)")
    fs.add("lookupd-http-address", "list", [], "lookupd HTTP address (may be given multiple times)")
    fs.add("topic", "list", [], topic_help)
    fs.add("consumer-opt", "list", [],
           "option to passthrough to nsq.Consumer (may be given multiple times, "
           "http://godoc.org/github.com/nsqio/go-nsq#Config)")


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
