"""Group commit across disk queues: one fsync round covers every queue written since the previous round began.

With ``--sync-every=1`` a publisher's OK must mean "on disk". Rather than each write syncing its own queue (one
fsync per message, per channel), a write marks its queue for the next round and the publisher waits for that round.
One round runs at a time; writes that arrive while it runs wait for the next, so a round serves every connection,
topic and channel that wrote meanwhile and costs one sync per queue, however many messages it covers.

A round also waits (briefly) for as many publishers as the previous round answered: they publish again as soon as
they have their OK, and a round is mostly fixed cost (a trip to a disk thread, the fsync's own CPU, waking the
waiters), so with many connections half-empty rounds alternating would cost a third more CPU per message.
"""

from __future__ import annotations

from typing import Protocol

import gevent
from gevent.event import Event

from .errors import BackendError

__all__ = ["GroupCommit"]


class Syncable(Protocol):
    def sync_data(self) -> None: ...


#: the longest a round waits for the publishers of the previous one to write again (they are usually back in
#: well under a millisecond; this bounds the wait when some of them have gone quiet)
GATHER_SECONDS = 0.004


class _Round:
    """The queues one round syncs; set when its syncs have returned (error: the first failure)."""

    __slots__ = ("done", "error", "gathered", "queues", "waiters")

    def __init__(self) -> None:
        self.queues: dict[Syncable, None] = {}  # insertion-ordered set
        self.done = Event()
        self.error: str | None = None
        self.waiters = 0
        self.gathered = Event()  # as many publishers wait for it as for the previous round


class GroupCommit:
    """Collects written queues and syncs them in rounds, one round at a time, in a greenlet of its own."""

    __slots__ = ("_current", "_expected", "_next", "_runner", "failures", "last_failure", "writes")

    def __init__(self) -> None:
        self._next = _Round()
        self._current: _Round | None = None
        self._runner: gevent.Greenlet | None = None
        self._expected = 0  # publishers that waited for the last round
        #: disk writes so far: a publisher compares it before and after to know whether it has to wait
        self.writes = 0
        #: writes that failed where the writer could not tell the publisher (a channel's copy), and the last error
        self.failures = 0
        self.last_failure = ""

    def written(self, queue: Syncable) -> None:
        """``queue`` got a record that must be made durable (called by DiskQueue.put; never yields)."""
        self._next.queues[queue] = None
        self.writes += 1
        if self._runner is None:
            self._runner = gevent.spawn(self._run)

    def failed(self, err: Exception) -> None:
        """A write of a channel's copy failed: the publisher must not get OK for it."""
        self.failures += 1
        self.last_failure = str(err)

    def wait(self) -> None:
        """Until the round covering every write made so far has returned; BackendError if its sync failed."""
        covering = self._next if self._next.queues else self._current
        if covering is None:
            return  # nothing written since the last round began, and that round is over
        covering.waiters += 1
        if covering.waiters >= self._expected:
            covering.gathered.set()
        covering.done.wait()
        if covering.error is not None:
            raise BackendError(covering.error)

    def _run(self) -> None:
        try:
            while self._next.queues:
                if self._next.waiters < self._expected:
                    self._next.gathered.wait(GATHER_SECONDS)
                else:
                    gevent.sleep(0)  # writers that are ready to run write first, and join this round
                current = self._current = self._next
                self._next = _Round()
                try:
                    current.error = _sync_all(list(current.queues))
                finally:
                    self._current = None
                    self._expected = current.waiters
                    current.done.set()
        finally:
            self._runner = None


def _sync_all(queues: list[Syncable]) -> str | None:
    """Sync the queues side by side (each sync spends its time on a disk thread); the first error, if any."""
    if len(queues) == 1:
        try:
            queues[0].sync_data()
        except BackendError as err:
            return str(err)
        return None
    syncs = [gevent.spawn(queue.sync_data) for queue in queues]
    gevent.joinall(syncs)
    for done in syncs:
        if done.exception is not None:
            return str(done.exception)
    return None
