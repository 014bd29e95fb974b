"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Blocking disk calls (fsync, the meta rewrite) run on a few OS threads of our own, woken by the hub's async watcher.

gevent's thread pool does the same job with a Python-level queue, condition, ThreadResult and AsyncResult per call:
about 50 us of CPU and up to 100 us of latency on top of an fdatasync, which with ``--sync-every=1`` every group
commit round pays while all its publishers wait. Here a call is one C-level SimpleQueue put, one ``async_.send`` back
and one greenlet switch. Threads start on first use (after a fork, too) and wait on the queue, never on the GIL.
"""

from __future__ import annotations

import _queue
import os
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
from gevent.hub import Waiter
from gevent.monkey import get_original

__all__ = ["run_blocking"]

T = TypeVar("T")

_start_new_thread = get_original("_thread", "start_new_thread")

#: threads at most: each written queue syncs in its own group commit rounds, side by side, and a slow disk under some
#: queues must not hold up the others' syncs (Go gives a goroutine blocked in a syscall a thread of its own). Threads
#: start only when every one is busy, so a fast disk keeps one or two.
MAX_THREADS = 32


class _DiskThreads:
    """The threads of one hub; jobs go in through a queue, results come back through the hub's async watcher."""

    def __init__(self) -> None:
        self._jobs: _queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], Waiter]] = _queue.SimpleQueue()
        self._results: deque[tuple[Waiter, Any, BaseException | None]] = deque()
        self._watcher = gevent.get_hub().loop.async_()
        self._watcher.start(self._deliver)
        self._watcher.ref = False  # only pending calls keep the loop alive
        self._threads = 0
        self._pending = 0  # calls not answered yet; only the hub's thread touches these counters

    def run(self, func: Callable[..., T], args: tuple[Any, ...]) -> T:
        waiter = Waiter()
        if self._pending >= self._threads < MAX_THREADS:  # every thread may be busy: one more
            self._threads += 1
            _start_new_thread(self._work, ())
        self._pending += 1
        self._watcher.ref = True
        self._jobs.put((func, args, waiter))
        try:
            result: T = waiter.get()
        finally:
            self._pending -= 1
            if not self._pending:
                self._watcher.ref = False
        return result

    def _work(self) -> None:
        jobs, results, send = self._jobs, self._results, self._watcher.send
        while True:
            func, args, waiter = jobs.get()
            try:
                results.append((waiter, func(*args), None))
            except BaseException as err:  # handed to the caller, raised there
                results.append((waiter, None, err))
            send()

    def _deliver(self) -> None:
        results = self._results
        while results:
            waiter, value, err = results.popleft()
            if err is None:
                waiter.switch(value)
            else:
                waiter.throw(err)


_by_hub: dict[int, _DiskThreads] = {}
os.register_at_fork(after_in_child=_by_hub.clear)  # a child has none of its parent's threads


def run_blocking(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` on a disk thread while this greenlet waits; its exception is raised here."""
    hub = gevent.get_hub()
    threads = _by_hub.get(id(hub))
    if threads is None:
        threads = _by_hub[id(hub)] = _DiskThreads()
    return threads.run(func, args)
