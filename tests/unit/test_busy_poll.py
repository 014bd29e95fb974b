"""The busy-poll policy (runtime/busy_poll.py) on this process's own event loop: when bursts open the window."""

from __future__ import annotations

import gevent

from nsqd_py.runtime.busy_poll import BusyPoll

WINDOW = 0.002  # long enough that a test's own steps fit well inside "close together" (3 windows)


def _bursts(poll: BusyPoll, count: int, apart: float = 0.0) -> None:
    for _ in range(count):
        poll.after_burst()
        if apart:
            gevent.sleep(apart)


def test_bursts_close_together_open_the_window_and_quiet_closes_it() -> None:
    poll = BusyPoll(WINDOW)
    _bursts(poll, 3)
    assert not poll.polling  # not yet: a few bursts in a row first
    _bursts(poll, 2)
    assert poll.polling
    gevent.sleep(10 * WINDOW)  # the window closes with nothing: one miss
    assert poll.polling
    poll.after_burst()  # a burst long after: its window closes with nothing too
    gevent.sleep(10 * WINDOW)
    assert not poll.polling


def test_bursts_far_apart_never_open_it() -> None:
    poll = BusyPoll(WINDOW)
    _bursts(poll, 8, apart=4 * WINDOW)
    assert not poll.polling


def test_a_window_of_zero_never_polls() -> None:
    poll = BusyPoll(0.0)
    _bursts(poll, 100)
    assert not poll.polling
