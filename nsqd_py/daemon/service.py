"""svc-style lifecycle: init, start, block until SIGINT/SIGTERM (or until the program says so), stop (like
judwhite/go-svc)."""

from __future__ import annotations

import signal
from typing import Protocol, runtime_checkable

import gevent
from gevent.queue import Queue


class Program(Protocol):
    def init(self) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


@runtime_checkable
class DecidesWhenToStop(Protocol):
    """A program that does more with a signal than stop (nsqd: --sigterm=drain) or stops without one."""

    def until_stopped(self, signals: Queue[int]) -> None:
        """Return when the program should stop; ``signals`` yields each of `run`'s signals as it arrives."""


def run(program: Program, signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """Run ``program`` until one of ``signals`` (or, for a `DecidesWhenToStop`, until it says so; a signal before
    its start waits for it); later signals during stop are ignored so the flush to disk always completes. Errors
    from init/start propagate to the caller."""
    received: Queue[int] = Queue()
    # before init: its listeners accept at once, and a signal from then on must mean a graceful stop
    handlers = [gevent.signal_handler(sig, received.put, sig) for sig in signals]
    try:
        program.init()
        try:
            program.start()
            if isinstance(program, DecidesWhenToStop):
                program.until_stopped(received)
            else:
                received.get()
        finally:
            program.stop()
    finally:
        for handler in handlers:
            handler.cancel()
