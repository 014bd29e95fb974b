"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Polling without sleeping for a moment after answers go out (issue 47), as Linux's `net.core.busy_poll` does for a
socket and Go's scheduler does before it parks a thread. A consumer at RDY 1 reads its message and sends its FIN
within tens of microseconds. A loop that sleeps in epoll meanwhile pays twice on that round trip: for its own sleep
and wakeup, and in the client's send, which must wake it on the other core. For a window after a burst (only where
it pays: `BusyPoll`) the loop polls with a zero timeout instead, yielding the core to any other thread that is ready
to run (the load beside it, on a 2-core machine). After the window, or with nothing sent, the loop sleeps as before:
an idle nsqd spends no CPU on this. The window is NSQD_PY_BUSY_POLL_US microseconds (0 turns it off), an environment
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


#: bursts this close together (a multiple of the window) say the clients answer fast enough for a window to catch
_NEAR_WINDOWS = 3
#: bursts in a row that close together before the loop starts polling after them
_NEAR_TO_START = 4
#: windows in a row that closed with nothing come before the loop stops polling after bursts
_MISSES_TO_STOP = 2
#: bursts between two looks at the thread's time waiting for a core
_SAMPLE_EVERY = 64
#: the share of a sample's time spent waiting for a core past which polling would take a core from someone else
_CONTENDED_SHARE = 0.05


class BusyPoll:
    """The busy-poll window of one event loop: `after_burst` opens it; an idle watcher keeps the loop from
    sleeping in its poll while it is open.

    A window pays only when the next command comes within it and the core is spare. So the loop polls after
    bursts only while they come close together, stops after windows that closed with nothing (a client at a
    low rate), and not at all while its thread waits for a core (the machine has no spare one: the load
    generators of a 2-core box, or other processes, would lose what the polling takes)."""

    __slots__ = ("_bursts", "_contended", "_idle", "_last_burst", "_loop", "_misses", "_near", "_polling",
                 "_sampled_at", "_schedstat", "_spinning", "_until", "_waited", "_window")

    def __init__(self, window: float) -> None:
        self._loop = get_hub().loop
        self._idle = self._loop.idle(ref=False)  # an active idle watcher makes libev poll without blocking
        self._window = window
        self._until = 0.0
        self._spinning = False  # the window is open
        self._polling = False  # bursts open it
        self._last_burst = 0.0
        self._near = 0
        self._misses = 0
        self._bursts = 0
        self._contended = False
        self._schedstat = _open_schedstat()
        self._sampled_at = time.monotonic()
        self._waited = self._wait_so_far()

    @property
    def polling(self) -> bool:
        """Whether bursts open the window now."""
        return self._polling

    def after_burst(self) -> None:
        """Answers just went out: their clients' next commands may follow within the window."""
        if self._window <= 0:
            return
        now = time.monotonic()
        if self._spinning:
            self._misses = 0  # this burst came while the window was open
        near = now - self._last_burst < _NEAR_WINDOWS * self._window
        self._last_burst = now
        self._near = self._near + 1 if near else 0
        self._bursts += 1
        if self._bursts % _SAMPLE_EVERY == 0:
            self._sample(now)
        if not self._polling:
            if self._near < _NEAR_TO_START or self._contended:
                return
            self._polling = True
            self._misses = 0
        self._until = now + self._window
        if not self._spinning:
            self._spinning = True
            self._idle.start(self._poll_again)

    def _poll_again(self) -> None:
        """Each loop turn with nothing to do while the window is open."""
        if time.monotonic() < self._until:
            os.sched_yield()
            return
        self._idle.stop()
        self._spinning = False
        self._misses += 1
        if self._misses >= _MISSES_TO_STOP:
            self._polling = False
            self._near = 0

    def _sample(self, now: float) -> None:
        """Whether this thread waited for a core for more than a small share of the time since the last sample."""
        waited = self._wait_so_far()
        elapsed = now - self._sampled_at
        self._contended = elapsed > 0 and (waited - self._waited) / elapsed > _CONTENDED_SHARE
        if self._contended:
            self._polling = False
        self._sampled_at = now
        self._waited = waited

    def _wait_so_far(self) -> float:
        """Seconds this thread has waited for a core (Linux's schedstat; 0 elsewhere)."""
        if self._schedstat < 0:
            return 0.0
        return int(os.pread(self._schedstat, 64, 0).split()[1]) / 1e9


def _open_schedstat() -> int:
    """The hub thread's /proc schedstat file (its second field: nanoseconds spent waiting on a run queue), or -1."""
    try:
        return os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


_shared: BusyPoll | None = None


def shared_busy_poll() -> BusyPoll:
    """The busy-poll window of this thread's event loop, one for every outbox on it (TCP and HTTP answers)."""
    global _shared
    if _shared is None or _shared._loop is not get_hub().loop:
        _shared = BusyPoll(busy_poll_seconds())
    return _shared
