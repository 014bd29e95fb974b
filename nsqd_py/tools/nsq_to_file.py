"""nsq_to_file: consume topics and write every message as a line to (optionally gzipped, rotated) files.

Same flags, defaults, file names and fatal messages as NSQ's Go tool (apps/nsq_to_file). One thread per topic
runs a `TopicRouter`; the main thread handles signals (SIGINT/SIGTERM: CLS, sync, close, move, exit 0;
SIGHUP: sync and close, reopened on the next message) and, without --topic, refreshes the topic list from
lookupd every --topic-refresh.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..client import Consumer, HTTPError, lookupd_topics
from ..go.durations import SECOND
from ..go.goflags import FlagSet
from ..runtime.log import ERROR, FATAL, WARN, Logger, parse_level
from ..runtime.version import version_line
from .common import ClientSettings, add_source_flags, client_settings, log_fatal, one_source, user_agent
from .file_logger import FatalError, FileLogger, FileOptions
from .filenames import filename_template
from .topic_router import TopicRouter

APP = "nsq_to_file"
_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def flag_set() -> FlagSet:
    fs = FlagSet(APP)
    fs.add("version", "bool", False, "print version string")
    fs.add("log-level", "string", "info", "set log verbosity: debug, info, warn, error, or fatal")
    fs.add("log-prefix", "string", "[nsq_to_file] ", "log message prefix")
    fs.add("channel", "string", "nsq_to_file", "nsq channel")
    fs.add("max-in-flight", "int", 200, "max number of messages to allow in flight")
    fs.add("output-dir", "string", "/tmp", "directory to write output files to")
    fs.add("work-dir", "string", "", "directory for in-progress files before moving to output-dir")
    fs.add("datetime-format", "string", "%Y-%m-%d_%H", "strftime compatible format for <DATETIME> in filename format")
    fs.add("filename-format", "string", "<TOPIC>.<HOST><REV>.<DATETIME>.log",
           "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. "
           "<REV> is increased when file already exists)")
    fs.add("host-identifier", "string", "",
           "value to output in log filename in place of hostname. <SHORT_HOST> and <HOSTNAME> are valid "
           "replacement tokens")
    fs.add("gzip-level", "int", 6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)")
    fs.add("gzip", "bool", False, "gzip output files.")
    fs.add("skip-empty-files", "bool", False, "skip writing empty files")
    fs.add("topic-refresh", "duration", 60 * SECOND, "how frequently the topic list should be refreshed")
    fs.add("topic-pattern", "string", "", "only log topics matching the following pattern")
    fs.add("rotate-size", "int", 0, "rotate the file when it grows bigger than `rotate-size` bytes")
    fs.add("rotate-interval", "duration", 0, "rotate the file every duration")
    fs.add("sync-interval", "duration", 30 * SECOND, "sync file to disk every duration")
    fs.add("http-client-connect-timeout", "duration", 2 * SECOND, "timeout for HTTP connect")
    fs.add("http-client-request-timeout", "duration", 5 * SECOND, "timeout for HTTP request")
    add_source_flags(fs, "nsq topic (may be given multiple times)")
    return fs


@dataclass
class Options:
    topics: list[str]
    topic_pattern: str
    topic_refresh: float
    channel: str
    nsqd_tcp_addresses: list[str]
    lookupd_http_addresses: list[str]
    consumer: ClientSettings
    max_in_flight: int
    http_timeout: tuple[float, float]
    log_prefix: str
    log_level: int
    files: FileOptions
    filename_format: str
    host_identifier: str
    sync_interval: float


def parse_options(argv: Sequence[str]) -> Options | None:
    """Flags to Options, with the Go tool's checks and `log.Fatal` messages; None after --version."""
    parsed = flag_set().parse(argv)
    v = parsed.values
    if parsed.args:
        log_fatal(f"unknown arguments: [{' '.join(parsed.args)}]")
    try:
        log_level = parse_level(v["log-level"])
    except ValueError:
        log_fatal("--log-level is invalid")
    if v["version"]:
        print(version_line(APP))
        return None
    if not v["channel"]:
        log_fatal("--channel is required")
    if v["http-client-connect-timeout"] <= 0:
        log_fatal("--http-client-connect-timeout should be positive")
    if v["http-client-request-timeout"] <= 0:
        log_fatal("--http-client-request-timeout should be positive")
    nsqds, lookupds = one_source(v, ".")
    if not 1 <= v["gzip-level"] <= 9:
        log_fatal(f"invalid --gzip-level value ({v['gzip-level']}), should be 1-9")
    if not v["topic"] and not v["topic-pattern"]:
        log_fatal("--topic or --topic-pattern required")
    if not v["topic"] and not lookupds:
        log_fatal("--lookupd-http-address must be specified when no --topic specified")
    try:
        consumer = client_settings(v["consumer-opt"])
    except ValueError as err:
        log_fatal(f"invalid --consumer-opt - {err}")
    files = FileOptions(
        output_dir=v["output-dir"], work_dir=v["work-dir"] or v["output-dir"],
        datetime_format=v["datetime-format"], gzip=v["gzip"], gzip_level=v["gzip-level"],
        rotate_size=v["rotate-size"], rotate_interval=v["rotate-interval"], skip_empty_files=v["skip-empty-files"],
    )
    opts = Options(
        topics=v["topic"], topic_pattern=v["topic-pattern"], topic_refresh=v["topic-refresh"] / SECOND,
        channel=v["channel"], nsqd_tcp_addresses=nsqds, lookupd_http_addresses=lookupds, consumer=consumer,
        max_in_flight=consumer.max_in_flight or v["max-in-flight"],
        http_timeout=(v["http-client-connect-timeout"] / SECOND, v["http-client-request-timeout"] / SECOND),
        log_prefix=v["log-prefix"], log_level=log_level, files=files, filename_format=v["filename-format"],
        host_identifier=v["host-identifier"], sync_interval=v["sync-interval"] / SECOND,
    )
    try:
        template_for(opts, "topic")
    except ValueError as err:  # the Go tool only logs this per topic and then idles; fail fast instead
        log_fatal(str(err))
    return opts


def template_for(opts: Options, topic: str) -> str:
    f = opts.files
    return filename_template(opts.filename_format, topic, host_identifier=opts.host_identifier, gzip=f.gzip,
                             needs_rev=f.rotate_size > 0 or f.rotate_interval > 0 or f.work_dir != f.output_dir)


class TopicDiscoverer:
    """Starts a router per (allowed) topic and relays signals to them (Go's TopicDiscoverer)."""

    def __init__(self, opts: Options, logger: Logger) -> None:
        self.opts = opts
        self.logger = logger
        self.routers: dict[str, TopicRouter] = {}
        self._threads: list[threading.Thread] = []
        self._pattern = _compile(opts.topic_pattern)
        self._wake = threading.Event()
        self._term = False
        self._hup = False

    def term(self) -> None:
        self._term = True
        self._wake.set()

    def hup(self) -> None:
        self._hup = True
        self._wake.set()

    def run(self) -> None:
        opts = self.opts
        refresh = not opts.topics
        self.update_topics(opts.topics if opts.topics else self._lookup_topics())
        next_refresh = time.monotonic() + opts.topic_refresh
        while not self._term:
            self._wake.wait(min(1.0, max(0.0, next_refresh - time.monotonic())) if refresh else 1.0)
            self._wake.clear()
            if self._hup:
                self._hup = False
                for router in self.routers.values():
                    router.hup.set()
            if refresh and time.monotonic() >= next_refresh:
                next_refresh = time.monotonic() + opts.topic_refresh
                self.update_topics(self._lookup_topics())
        for router in self.routers.values():
            router.term.set()
        for thread in self._threads:
            thread.join()

    def update_topics(self, topics: list[str]) -> None:
        opts = self.opts
        for topic in topics:
            if topic in self.routers:
                continue
            if not self._allowed(topic):
                self.logger.log(WARN, f"skipping topic {topic} (doesn't match pattern {opts.topic_pattern})")
                continue
            try:
                template = template_for(opts, topic)
            except ValueError as err:
                self.logger.error(f"couldn't create logger for new topic {topic}: {err}")
                continue
            consumer = Consumer(
                topic, opts.channel, nsqd_tcp_addresses=opts.nsqd_tcp_addresses,
                lookupd_http_addresses=opts.lookupd_http_addresses, max_in_flight=opts.max_in_flight,
                identify=opts.consumer.identify, tls_context=opts.consumer.tls_context(),
                timeout=opts.consumer.timeout, lookupd_poll_interval=opts.consumer.lookupd_poll_interval,
                http_timeout=opts.http_timeout, user_agent=user_agent(APP), log=self.logger.log,
            )
            files = FileLogger(opts.files, template, self.logger.log, f"[{topic}/{opts.channel}]")
            router = TopicRouter(consumer, files, max_in_flight=opts.max_in_flight,
                                 sync_interval=opts.sync_interval, skip_empty_files=opts.files.skip_empty_files)
            self.routers[topic] = router
            thread = threading.Thread(target=self._run_router, args=(router,), name=f"router:{topic}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run_router(self, router: TopicRouter) -> None:
        """Like the Go tool, a FATAL condition exits at once: nothing more is synced or FINed."""
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)  # let the main thread take them, at once
        try:
            router.run()
        except FatalError as err:
            self.logger.fatal(str(err))
            os._exit(1)
        except Exception as err:
            router.files.log(FATAL, f"{type(err).__name__}: {err}")
            os._exit(1)

    def _lookup_topics(self) -> list[str]:
        try:
            return lookupd_topics(self.opts.lookupd_http_addresses, self.opts.http_timeout)
        except HTTPError as err:
            self.logger.log(ERROR, f"could not retrieve topic list: {err}")
            return []

    def _allowed(self, topic: str) -> bool:
        if not self.opts.topic_pattern:
            return True
        return self._pattern is not None and self._pattern.search(topic) is not None


def _compile(pattern: str) -> re.Pattern[str] | None:
    """Go skips every topic when the pattern does not compile."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


def run(opts: Options) -> None:
    logger = Logger(opts.log_prefix, opts.log_level)
    discoverer = TopicDiscoverer(opts, logger)
    signal.signal(signal.SIGINT, lambda *_: discoverer.term())
    signal.signal(signal.SIGTERM, lambda *_: discoverer.term())
    signal.signal(signal.SIGHUP, lambda *_: discoverer.hup())
    discoverer.run()
