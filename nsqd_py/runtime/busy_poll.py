"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Polling without sleeping for a moment after answers go out (issue 47), as Linux's `net.core.busy_poll` does for a
socket and Go's scheduler does before it parks a thread. A consumer at RDY 1 reads its message and sends its FIN
within tens of microseconds. A loop that sleeps in epoll meanwhile pays twice on that round trip: for its own
sleep and wakeup, and in the client's send, which must wake it on the other core. For a window after each burst
the loop polls with a zero timeout instead, yielding the core to any other thread that is ready to run (the load
beside it, on a 2-core machine). After the window, or with nothing sent, the loop sleeps as before: an idle nsqd
spends no CPU on this. The window is NSQD_PY_BUSY_POLL_US microseconds (0 turns it off), an environment
variable like NSQD_PY_IO_WORKERS, so that nsqd's flags and TOML keys stay exactly Go's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from gevent.hub import get_hub

BUSY_POLL_ENV = "NSQD_PY_BUSY_POLL_US"
#: long enough for a client at RDY 1 to read a message and send its FIN on this machine kind (issue 47's runs)
DEFAULT_BUSY_POLL_US = 50
#: a window longer than this spends a core on waiting, for no client that answers this slowly
MAX_BUSY_POLL_US = 10_000


def busy_poll_seconds(environ: Mapping[str, str] = os.environ) -> float:
    """The busy-poll window asked for, in seconds (0: the loop sleeps at once); ValueError."""
    text = environ.get(BUSY_POLL_ENV, "").strip() or str(DEFAULT_BUSY_POLL_US)
    try:
        micros = int(text)
    except ValueError:
        raise ValueError(f"{BUSY_POLL_ENV} must be a whole number of microseconds, not {text}") from None
    if not 0 <= micros <= MAX_BUSY_POLL_US:
        raise ValueError(f"{BUSY_POLL_ENV} must be 0 to {MAX_BUSY_POLL_US}, not {text}")
    return micros / 1e6


class BusyPoll:
    """The busy-poll window of one event loop: `after_burst` (re)opens it; an idle watcher keeps the loop from
    sleeping in its poll while it is open."""

    __slots__ = ("_idle", "_loop", "_spinning", "_until", "_window")

    def __init__(self, window: float) -> None:
        self._loop = get_hub().loop
        self._idle = self._loop.idle(ref=False)  # an active idle watcher makes libev poll without blocking
        self._window = window
        self._until = 0.0
        self._spinning = False

    def after_burst(self) -> None:
        """Answers just went out: their clients' next commands are likely to follow within the window."""
        if self._window <= 0:
            return
        self._until = time.monotonic() + self._window
        if not self._spinning:
            self._spinning = True
            self._idle.start(self._poll_again)

    def _poll_again(self) -> None:
        """Each loop turn with nothing to do while the window is open."""
        if time.monotonic() >= self._until:
            self._idle.stop()
            self._spinning = False
        else:
            os.sched_yield()


_shared: BusyPoll | None = None


def shared_busy_poll() -> BusyPoll:
    """The busy-poll window of this thread's event loop, one for every outbox on it (TCP and HTTP answers)."""
    global _shared
    if _shared is None or _shared._loop is not get_hub().loop:
        _shared = BusyPoll(busy_poll_seconds())
    return _shared
