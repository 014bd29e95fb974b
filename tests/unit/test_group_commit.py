"""GroupCommit: one round at a time, each covering every queue written since the previous round began."""

from __future__ import annotations

import gevent
import pytest
from gevent.event import Event

from nsqd_py.core.errors import BackendError
from nsqd_py.core.group_commit import GroupCommit


class FakeQueue:
    """Records its syncs; a sync waits for ``gate`` when one is set, and raises ``fail`` when given."""

    def __init__(self, name: str, log: list[str], gate: Event | None = None, fail: str | None = None) -> None:
        self.name, self.log, self.gate, self.fail = name, log, gate, fail

    def sync_data(self) -> None:
        self.log.append(f"start {self.name}")
        if self.gate is not None:
            self.gate.wait()
        if self.fail is not None:
            raise BackendError(self.fail)
        self.log.append(f"end {self.name}")


def test_writes_during_a_round_share_the_next_one_and_wait_for_it() -> None:
    group, log = GroupCommit(), []
    first_gate, second_gate = Event(), Event()
    a, b = FakeQueue("a", log, first_gate), FakeQueue("b", log, second_gate)
    group.written(a)
    first = gevent.spawn(group.wait)
    gevent.idle()
    assert log == ["start a"]  # round 1 runs; the writes below arrive meanwhile
    a.gate = None
    for queue in (a, b, b, a):
        group.written(queue)
    later = [gevent.spawn(group.wait) for _ in range(3)]
    gevent.idle()
    assert not first.ready() and not any(w.ready() for w in later)
    first_gate.set()
    first.join(timeout=5)
    gevent.idle()
    assert first.successful()
    assert not any(w.ready() for w in later), "round 2 (a and b) has not returned yet"
    assert sorted(log) == sorted(["start a", "end a", "start a", "end a", "start b"])
    second_gate.set()
    gevent.joinall(later, timeout=5, raise_error=True)
    assert log.count("start a") == 2 and log.count("start b") == 1, "one sync per queue per round"
    assert group.writes == 5


def test_a_failed_sync_fails_the_waiters_of_its_round_only() -> None:
    group, log = GroupCommit(), []
    broken = FakeQueue("a", log, fail="disk on fire")
    group.written(broken)
    with pytest.raises(BackendError, match="disk on fire"):
        group.wait()
    broken.fail = None
    group.written(broken)
    group.wait()
    assert log == ["start a", "start a", "end a"]


def test_wait_without_a_write_since_the_last_round_returns_at_once() -> None:
    group, log = GroupCommit(), []
    group.wait()
    group.written(FakeQueue("a", log))
    group.wait()
    group.wait()
    assert log == ["start a", "end a"]
