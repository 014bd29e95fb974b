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
from ..go.settings import BOOL, DURATION, INT, STRING, parse_flags, setting
from ..runtime.log import ERROR, FATAL, INFO, WARN, Logger, parse_level
from .common import HTTPTimeoutOptions, SourceOptions, log_fatal, printed_version, read_client_settings, user_agent
from .file_logger import FatalError, FileLogger, FileOptions
from .filenames import filename_template
from .topic_router import TopicRouter

APP = "nsq_to_file"
_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@dataclass
class ToFileOptions(SourceOptions, HTTPTimeoutOptions):
    log_level_name: str = setting("log-level", STRING, "info", "set log verbosity: debug, info, warn, error, or fatal")
    log_prefix: str = setting("log-prefix", STRING, "[nsq_to_file] ", "log message prefix")
    channel: str = setting("channel", STRING, "nsq_to_file", "nsq channel")
    output_dir: str = setting("output-dir", STRING, "/tmp", "directory to write output files to")
    work_dir: str = setting("work-dir", STRING, "", "directory for in-progress files before moving to output-dir")
    datetime_format: str = setting("datetime-format", STRING, "%Y-%m-%d_%H",
                                   "strftime compatible format for <DATETIME> in filename format")
    filename_format: str = setting("filename-format", STRING, "<TOPIC>.<HOST><REV>.<DATETIME>.log",
                                   "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. "
                                   "<REV> is increased when file already exists)")
    host_identifier: str = setting("host-identifier", STRING, "",
                                   "value to output in log filename in place of hostname. <SHORT_HOST> and "
                                   "<HOSTNAME> are valid replacement tokens")
    gzip_level: int = setting("gzip-level", INT, 6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)")
    gzip: bool = setting("gzip", BOOL, False, "gzip output files.")
    skip_empty_files: bool = setting("skip-empty-files", BOOL, False, "skip writing empty files")
    topic_refresh: int = setting("topic-refresh", DURATION, 60 * SECOND,
                                 "how frequently the topic list should be refreshed")
    topic_pattern: str = setting("topic-pattern", STRING, "", "only log topics matching the following pattern")
    rotate_size: int = setting("rotate-size", INT, 0, "rotate the file when it grows bigger than `rotate-size` bytes")
    rotate_interval: int = setting("rotate-interval", DURATION, 0, "rotate the file every duration")
    sync_interval: int = setting("sync-interval", DURATION, 30 * SECOND, "sync file to disk every duration")
    #: the parsed `log_level_name`
    log_level: int = INFO

    @property
    def files(self) -> FileOptions:
        return FileOptions(
            output_dir=self.output_dir, work_dir=self.work_dir or self.output_dir,
            datetime_format=self.datetime_format, gzip=self.gzip, gzip_level=self.gzip_level,
            rotate_size=self.rotate_size, rotate_interval=self.rotate_interval, skip_empty_files=self.skip_empty_files,
        )


def parse_options(argv: Sequence[str]) -> ToFileOptions | None:
    """Flags to ToFileOptions, with the Go tool's checks and `log.Fatal` messages; None after --version."""
    opts, parsed = parse_flags(ToFileOptions, APP, argv)
    if parsed.args:
        log_fatal(f"unknown arguments: [{' '.join(parsed.args)}]")
    try:
        opts.log_level = parse_level(opts.log_level_name)
    except ValueError:
        log_fatal("--log-level is invalid")
    if printed_version(opts.version, APP):
        return None
    if not opts.channel:
        log_fatal("--channel is required")
    opts.check_http_timeouts()
    opts.check_one_source(".")
    if not 1 <= opts.gzip_level <= 9:
        log_fatal(f"invalid --gzip-level value ({opts.gzip_level}), should be 1-9")
    if not opts.topics and not opts.topic_pattern:
        log_fatal("--topic or --topic-pattern required")
    if not opts.topics and not opts.lookupd_http_addresses:
        log_fatal("--lookupd-http-address must be specified when no --topic specified")
    opts.consumer = read_client_settings(opts.consumer_opts, "invalid --consumer-opt")
    opts.max_in_flight = opts.consumer.max_in_flight or opts.max_in_flight
    try:
        template_for(opts, "topic")
    except ValueError as err:  # the Go tool only logs this per topic and then idles; fail fast instead
        log_fatal(str(err))
    return opts


def template_for(opts: ToFileOptions, topic: str) -> str:
    f = opts.files
    return filename_template(opts.filename_format, topic, host_identifier=opts.host_identifier, gzip=f.gzip,
                             needs_rev=f.rotate_size > 0 or f.rotate_interval > 0 or f.work_dir != f.output_dir)


class TopicDiscoverer:
    """Starts a router per (allowed) topic and relays signals to them (Go's TopicDiscoverer)."""

    def __init__(self, opts: ToFileOptions, logger: Logger) -> None:
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
        next_refresh = time.monotonic() + opts.topic_refresh / SECOND
        while not self._term:
            self._wake.wait(min(1.0, max(0.0, next_refresh - time.monotonic())) if refresh else 1.0)
            self._wake.clear()
            if self._hup:
                self._hup = False
                for router in self.routers.values():
                    router.hup.set()
            if refresh and time.monotonic() >= next_refresh:
                next_refresh = time.monotonic() + opts.topic_refresh / SECOND
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
                                 sync_interval=opts.sync_interval / SECOND, skip_empty_files=opts.skip_empty_files)
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


def run(opts: ToFileOptions) -> None:
    logger = Logger(opts.log_prefix, opts.log_level)
    discoverer = TopicDiscoverer(opts, logger)
    signal.signal(signal.SIGINT, lambda *_: discoverer.term())
    signal.signal(signal.SIGTERM, lambda *_: discoverer.term())
    signal.signal(signal.SIGHUP, lambda *_: discoverer.hup())
    discoverer.run()
