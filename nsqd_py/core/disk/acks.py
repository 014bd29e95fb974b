"""What an OK to a publisher means. Topic asks it, Channel and the disk queues tell it; nothing else decides.

Without --sync-every=1 an OK leaves once the message is accepted: in memory, or written to a data file (the page
cache). A channel's copy that could not be written is logged and dropped, as in nsqd, and the OK still leaves.

With --sync-every=1 (``durable``) an OK means "on disk":

* **Covered.** A record written to a disk queue (:meth:`Acks.written`) joins the next group commit *round*; that
  round's sync of the queue covers it. One round runs at a time and covers every queue written since the previous
  round began, across connections, topics and channels, at one ``sync_data`` per queue however many records it
  got (an MPUB costs one sync per queue it touches, 32 concurrent PUBs share one).
* **Answered.** A publish (:meth:`Acks.begin` ... :meth:`Acks.settle`) is answered once the round covering the
  last record it wrote has returned; a publish that wrote nothing to disk is answered at once.
* **Failed.** A round with a failed sync fails every publish waiting for it (their writes and others' in the same
  round alike) and makes nsqd unhealthy; a record it did not make durable is synced again by the queue's next
  sync. A channel's copy that could not be written fails the publish that made it: the other copies stay.

A round first waits, briefly, for as many publishers as the previous round answered: they publish again as soon as
they have their OK, and a round is mostly fixed cost (a trip to a disk thread, the fsync's own CPU, waking the
waiters), so with many connections half-empty rounds alternating would cost a third more CPU per message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import gevent
from gevent.event import Event

from ..errors import BackendError

__all__ = ["Acks"]


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


class Acks:
    """When a publish may be answered OK; with ``durable``, runs the group commit rounds in a greenlet of its own."""

    __slots__ = ("_current", "_expected", "_failures", "_last_failure", "_next", "_runner", "_unhealthy", "durable",
                 "writes")

    def __init__(self, sync_every: int, unhealthy: Callable[[Exception], None]) -> None:
        #: --sync-every=1: every write synced before its OK
        self.durable = sync_every <= 1
        self._unhealthy = unhealthy  # told of a failed round
        self._next = _Round()
        self._current: _Round | None = None
        self._runner: gevent.Greenlet | None = None
        self._expected = 0  # publishers that waited for the last round
        #: records written to disk queues so far (durable only)
        self.writes = 0
        self._failures = 0  # channel copies that could not be written (durable only), and the last error
        self._last_failure = ""

    # ---- a publish ------------------------------------------------------------------------------

    def begin(self) -> tuple[int, int]:
        """Taken before a publish writes anything; hand it to settle() once the publish has written."""
        return self.writes, self._failures

    def settle(self, begun: tuple[int, int]) -> None:
        """Return when the publish that began at ``begun`` may be answered OK; BackendError when it must not: the
        round covering its writes failed, or one of its channel copies could not be written."""
        writes, failures = begun
        if self.writes != writes:
            try:
                self.wait()
            except BackendError as err:
                self._unhealthy(err)
                raise
        if self._failures != failures:
            raise BackendError(self._last_failure)

    # ---- told by the writers ---------------------------------------------------------------------

    def written(self, queue: Syncable) -> None:
        """``queue`` got a record that must be made durable (called by DiskQueue.put when durable; never yields)."""
        self._next.queues[queue] = None
        self.writes += 1
        if self._runner is None:
            self._runner = gevent.spawn(self._run)

    def failed(self, err: Exception) -> None:
        """A channel's copy could not be written: when durable, its publish must not be answered OK."""
        if self.durable:
            self._failures += 1
            self._last_failure = str(err)

    # ---- rounds ---------------------------------------------------------------------------------

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
