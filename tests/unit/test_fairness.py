"""BusyGuard: a reader whose socket always has data yields after its budget; waiting in the hub is not busy."""

from __future__ import annotations

import time

import gevent
import pytest

from nsqd_py.runtime import fairness
from nsqd_py.runtime.fairness import BUSY_BUDGET_SECONDS, BusyGuard


def burn(seconds: float) -> None:
    """Run without giving the hub a turn, as a reader with data always waiting does."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_reader_that_never_waits_lets_the_others_run() -> None:
    start = time.monotonic()
    guard = BusyGuard()
    other_ran: list[float] = []
    gevent.spawn(lambda: other_ran.append(time.monotonic()))
    while not other_ran and time.monotonic() - start < 5:
        burn(0.0005)
        guard.check()
    assert other_ran, "the other greenlet never got a turn"
    assert other_ran[0] - start >= BUSY_BUDGET_SECONDS  # not before the budget was used


def test_time_spent_waiting_in_the_hub_is_not_busy_time(monkeypatch: pytest.MonkeyPatch) -> None:
    hub_wait = gevent.sleep
    yields: list[float] = []
    monkeypatch.setattr(fairness.gevent, "sleep", lambda seconds: (yields.append(seconds), hub_wait(seconds)))
    guard = BusyGuard()
    for _ in range(20):  # 20 x (1 ms of work + a wait): far past the budget in wall time, never busy for long
        hub_wait(0.001)
        burn(0.001)
        guard.check()
    assert yields == []
    burn(BUSY_BUDGET_SECONDS * 2)
    guard.check()  # the first look that finds the hub has not run: the budget counts from here
    assert yields == []
    burn(BUSY_BUDGET_SECONDS * 2)
    guard.check()
    assert yields == [0.0001]
