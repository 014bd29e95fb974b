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
    stop_requested = Event()
    # before init: its listeners accept at once, and a signal from then on must mean a graceful stop
    handlers = [gevent.signal_handler(sig, stop_requested.set) for sig in signals]
    try:
        program.init()
        try:
            program.start()
            stop_requested.wait()
        finally:
            program.stop()
    finally:
        for handler in handlers:
            handler.cancel()
