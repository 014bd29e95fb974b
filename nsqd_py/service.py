"""svc-style lifecycle: init, start, block until SIGINT/SIGTERM, stop (like judwhite/go-svc)."""

from __future__ import annotations

import signal
from typing import Protocol

import gevent
from gevent.event import Event


class Program(Protocol):
    def init(self) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


def run(program: Program, signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """Run ``program`` until one of ``signals``; later signals during stop are ignored so the
    flush to disk always completes. Errors from init/start propagate to the caller."""
    program.init()
    stop_requested = Event()
    handlers = [gevent.signal_handler(sig, stop_requested.set) for sig in signals]
    try:
        program.start()
        stop_requested.wait()
    finally:
        program.stop()
        for handler in handlers:
            handler.cancel()
