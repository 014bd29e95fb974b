"""Log lines in nsqd's format: `[nsqd] 2026/11/22 06:39:26.680662 INFO: text` on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO

DEBUG, INFO, WARN, ERROR, FATAL = 1, 2, 3, 4, 5

LEVEL_NAMES = {DEBUG: "DEBUG", INFO: "INFO", WARN: "WARNING", ERROR: "ERROR", FATAL: "FATAL"}

#: Names accepted by --log-level (nsqd's lg.ParseLogLevel), lower-cased.
LEVELS_BY_NAME = {"debug": DEBUG, "info": INFO, "warn": WARN, "warning": WARN, "error": ERROR, "fatal": FATAL}


def parse_level(name: str) -> int:
    """Level number for a --log-level value; ValueError for an unknown one."""
    try:
        return LEVELS_BY_NAME[name.strip().lower()]
    except KeyError:
        raise ValueError(f"invalid log level '{name}' (debug, info, warn, error, fatal)") from None


class Logger:
    """A leveled logger writing nsqd-style lines; cheap to call below its level."""

    __slots__ = ("level", "prefix", "stream")

    def __init__(self, prefix: str = "[nsqd] ", level: int = INFO, stream: TextIO | None = None) -> None:
        self.prefix = prefix
        self.level = level
        self.stream = stream

    def log(self, level: int, msg: str) -> None:
        if level < self.level:
            return
        now = time.time()
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now))
        micros = int((now % 1) * 1_000_000)
        out = self.stream or sys.stderr
        try:
            out.write(f"{self.prefix}{stamp}.{micros:06d} {LEVEL_NAMES[level]}: {msg}\n")
            out.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stderr must never take the broker down

    def debug(self, msg: str) -> None:
        self.log(DEBUG, msg)

    def info(self, msg: str) -> None:
        self.log(INFO, msg)

    def warn(self, msg: str) -> None:
        self.log(WARN, msg)

    def error(self, msg: str) -> None:
        self.log(ERROR, msg)

    def fatal(self, msg: str) -> None:
        self.log(FATAL, msg)
