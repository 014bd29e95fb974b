"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Fair turns on the gevent loop for greenlets that read from sockets which always have data.

Such a socket never makes gevent switch (each recv returns at once), so one busy client could keep the
event loop, and every other client, waiting. A reader asks `BusyGuard.check()` before each recv: once it
has run for the budget without the hub running in between, it sleeps a moment (a timer, so the loop polls
everyone's sockets first). Waiting in the hub does not count as busy: libev's loop iteration counter tells
whether the hub ran since the last look (with libuv, which has no counter, every budget's worth of time
counts, a yield at most every 5 ms). The budget counts from the first look that finds the hub has not run:
most recvs follow a wait in the hub, and those read no clock.
"""

from __future__ import annotations

import time

import gevent

#: how long one greenlet may keep the event loop to itself
BUSY_BUDGET_SECONDS = 0.005


class BusyGuard:
    """One per reading greenlet; `check()` before each recv."""

    __slots__ = ("_iteration", "_loop", "_since")

    def __init__(self) -> None:
        self._loop = gevent.get_hub().loop
        self._iteration = self._loop.iteration
        #: when this greenlet first found the hub had not run since its last look; 0: the hub ran since
        self._since = 0.0

    def check(self) -> None:
        iteration = self._loop.iteration
        # the hub ran: this greenlet waited since the last look. No clock is read then: that is every recv of a
        # client that waits for its answers.
        if iteration != self._iteration:
            self._iteration = iteration
            self._since = 0.0
        elif not self._since:
            self._since = time.monotonic()
        elif time.monotonic() - self._since > BUSY_BUDGET_SECONDS:
            gevent.sleep(0.0001)
            self._iteration = self._loop.iteration
            self._since = 0.0
