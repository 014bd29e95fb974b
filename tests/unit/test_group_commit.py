"""Acks' group commit: each queue runs its own rounds, one at a time, each covering every record the queue got since
its previous round began; a publish waits for the rounds of the queues it wrote to."""

from __future__ import annotations

import time

import gevent
import pytest
from gevent.event import Event

from nsqd_py.core.disk import acks
from nsqd_py.core.disk.acks import Acks, QueueCommits
from nsqd_py.core.errors import BackendError


class FakeQueue:
    """Records its syncs; a sync waits for ``gate`` when one is set, and raises ``fail`` when given."""

    def __init__(self, name: str, log: list[str], gate: Event | None = None, fail: str | None = None) -> None:
        self.name, self.log, self.gate, self.fail = name, log, gate, fail
        self.commits: QueueCommits | None = None

    def sync_data(self) -> None:
        self.log.append(f"start {self.name}")
        if self.gate is not None:
            self.gate.wait()
        if self.fail is not None:
            raise BackendError(self.fail)
        self.log.append(f"end {self.name}")


def durable() -> Acks:
    return Acks(sync_every=1, unhealthy=lambda err: None)


def test_writes_during_a_round_share_the_next_one_and_wait_for_it() -> None:
    group, log = durable(), []
    first_gate = Event()
    a = FakeQueue("a", log, first_gate)
    group.written(a)
    first = gevent.spawn(group.wait)
    gevent.idle()
    assert log == ["start a"]  # round 1 runs; the writes below arrive meanwhile
    second_gate = a.gate = Event()
    for _ in range(3):
        group.written(a)
    later = [gevent.spawn(group.wait) for _ in range(3)]
    gevent.idle()
    assert not first.ready() and not any(w.ready() for w in later)
    first_gate.set()
    first.join(timeout=5)
    gevent.idle()
    assert first.successful()
    assert not any(w.ready() for w in later), "round 2 has not returned yet"
    assert log == ["start a", "end a", "start a"]
    second_gate.set()
    gevent.joinall(later, timeout=5, raise_error=True)
    assert log.count("start a") == 2, "one sync per round however many records"
    assert group.writes == 4


def _publish(group: Acks, *queues: FakeQueue) -> None:
    """What Topic.publish does: begin, write to each queue, settle."""
    begun = group.begin()
    for queue in queues:
        group.written(queue)
    group.settle(begun)


def test_a_slow_queue_holds_up_only_the_publishes_that_wrote_to_it() -> None:
    group, log = durable(), []
    slow, fast = FakeQueue("slow", log, Event()), FakeQueue("fast", log)
    stuck = gevent.spawn(_publish, group, slow)
    gevent.idle()
    assert log == ["start slow"]
    for _ in range(3):
        gevent.spawn(_publish, group, fast).join(timeout=5)  # each answered while the slow sync still runs
    assert log.count("end fast") == 3 and not stuck.ready()
    both = gevent.spawn(_publish, group, fast, slow)  # an MPUB whose channels sit on both
    gevent.sleep(0.05)
    assert not both.ready(), "it waits for the slow queue's next round too"
    assert slow.gate is not None
    slow.gate.set()
    gevent.joinall([stuck, both], timeout=5, raise_error=True)


def test_a_publish_interleaved_with_another_waits_for_every_queue() -> None:
    """Publishes do not yield between begin and settle; if one did, its writes after another publish began would
    not be in its own record, so it falls back to waiting for every queue written so far."""
    group, log = durable(), []
    gate = Event()
    a, b = FakeQueue("a", log, gate), FakeQueue("b", log)
    first = group.begin()
    second = group.begin()
    group.written(b)
    group.settle(second)
    assert log == ["start b", "end b"]
    group.written(a)  # the first publish's write, made after the second one began
    waiting = gevent.spawn(group.settle, first)
    gevent.sleep(0.05)
    assert log == ["start b", "end b", "start a"] and not waiting.ready()
    gate.set()
    waiting.join(timeout=5)
    assert waiting.successful()


def test_a_failed_sync_fails_the_waiters_of_its_round_only() -> None:
    group, log = durable(), []
    broken = FakeQueue("a", log, fail="disk on fire")
    group.written(broken)
    with pytest.raises(BackendError, match="disk on fire"):
        group.wait()
    broken.fail = None
    group.written(broken)
    group.wait()
    assert log == ["start a", "start a", "end a"]


def test_wait_without_a_write_since_the_last_round_returns_at_once() -> None:
    group, log = durable(), []
    group.wait()
    group.written(FakeQueue("a", log))
    group.wait()
    group.wait()
    assert log == ["start a", "end a"]


def _publisher(group: Acks, queue: FakeQueue, delay: float) -> None:
    gevent.sleep(delay)
    group.written(queue)
    group.wait()


@pytest.fixture
def gather(monkeypatch: pytest.MonkeyPatch) -> float:
    """A gathering time long enough that a loaded machine cannot make these tests flaky."""
    monkeypatch.setattr(acks, "GATHER_SECONDS", 0.2)
    return 0.2


def test_a_round_waits_for_the_publishers_of_the_previous_round(gather: float) -> None:
    """Three publishers were answered by round 1; they come back 0, 10 and 20 ms later, all inside the gathering
    time, so one round (one sync) answers all three."""
    group, log = durable(), []
    queue = FakeQueue("a", log)
    gevent.joinall([gevent.spawn(_publisher, group, queue, 0) for _ in range(3)], timeout=5, raise_error=True)
    assert log.count("start a") == 1
    gevent.joinall([gevent.spawn(_publisher, group, queue, delay) for delay in (0, 0.01, 0.02)], timeout=5,
                   raise_error=True)
    assert log.count("start a") == 2, log


def test_a_round_does_not_wait_past_the_gathering_time_for_publishers_that_left(gather: float) -> None:
    """Round 1 answered three publishers; only one comes back: its round starts after the gathering time, and
    the round after it waits for one publisher only."""
    group, log = durable(), []
    queue = FakeQueue("a", log)
    gevent.joinall([gevent.spawn(_publisher, group, queue, 0) for _ in range(3)], timeout=5, raise_error=True)
    started = time.monotonic()
    _publisher(group, queue, 0)
    assert gather * 0.9 <= time.monotonic() - started < gather + 1.0
    started = time.monotonic()
    _publisher(group, queue, 0)
    assert time.monotonic() - started < gather * 0.5, "one publisher left: no waiting for three"
    assert log.count("start a") == 3


def test_a_publish_that_wrote_nothing_settles_while_a_round_runs() -> None:
    group, log = durable(), []
    gate = Event()
    group.written(FakeQueue("a", log, gate))
    others = gevent.spawn(group.wait)
    gevent.idle()
    group.settle(group.begin())  # only memory: no wait for the others' round
    assert not others.ready()
    gate.set()
    others.join(timeout=5)


def test_a_failed_round_fails_its_publishes_and_makes_nsqd_unhealthy() -> None:
    told: list[Exception] = []
    group = Acks(sync_every=1, unhealthy=told.append)
    begun = group.begin()
    group.written(FakeQueue("a", [], fail="disk on fire"))
    with pytest.raises(BackendError, match="disk on fire"):
        group.settle(begun)
    assert [str(err) for err in told] == ["disk on fire"]


def test_a_lost_channel_copy_fails_its_publish_only_when_durable() -> None:
    told: list[Exception] = []
    for sync_every, fails in ((1, True), (2500, False)):
        group = Acks(sync_every=sync_every, unhealthy=told.append)
        begun = group.begin()
        group.failed(BackendError("no space"))
        if fails:
            with pytest.raises(BackendError, match="no space"):
                group.settle(begun)
        else:
            group.settle(begun)
        group.settle(group.begin())  # a later publish is not failed by it
    assert not told, "the channel told nsqd itself"
