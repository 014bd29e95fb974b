"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

What an OK to a publisher means. Topic asks it, Channel and the disk queues tell it; nothing else decides.

Without --sync-every=1 an OK leaves once the message is accepted: in memory, or written to a data file (the page
cache). A channel's copy that could not be written is logged and dropped, as in nsqd, and the OK still leaves.

With --sync-every=1 (``durable``) an OK means "on disk":

* **Covered.** A record written to a disk queue (:meth:`Acks.written`) joins that queue's next group commit
  *round*; the round's sync covers every record the queue got since its previous round began, at one ``sync_data``
  however many records and publishers it holds (32 concurrent PUBs to a topic share one). Each queue runs its own
  rounds, one at a time, so a slow or failing disk under one queue holds up only the publishes that wrote to it.
* **Answered.** A publish (:meth:`Acks.begin` ... :meth:`Acks.settle`) is answered once the rounds covering its
  records have returned: an MPUB to a topic with two disk-backed channels waits for those two queues, side by side.
  A publish that wrote nothing to disk is answered at once. Should another publish begin while one is writing
  (they do not yield, so this is a safety net), the first one waits for every queue written so far instead.
* **Failed.** A round whose sync failed fails every publish waiting for it and makes nsqd unhealthy; what the queue
  keeps afterwards is its own rule (DiskQueue.sync_data). A channel's copy that could not be written fails the
  publish that made it: the other copies stay.

A round first waits, briefly, for as many publishers as the queue's previous round answered: they publish again as
soon as they have their OK, and a round is mostly fixed cost (a trip to a disk thread, the fsync's own CPU, waking
the waiters), so with many connections half-empty rounds alternating would cost a third more CPU per message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import gevent
from gevent.event import Event

from ..errors import BackendError

__all__ = ["Acks"]


class _Round:
    """One sync of one queue; ``done`` is set when it has returned (``error``: why it failed)."""

    __slots__ = ("done", "error", "expected", "gathered", "waiters")

    def __init__(self, expected: int) -> None:
        self.done = Event()
        self.error: str | None = None
        self.waiters = 0
        self.expected = expected  # the publishers that waited for the queue's previous round
        self.gathered = Event()  # set once as many wait for this one


class QueueCommits:
    """A queue's rounds (kept by the queue, so they go with it): ``next`` gathers records while ``current`` syncs,
    in a greenlet that lives while writes keep coming."""

    __slots__ = ("current", "next", "pending", "runner")

    def __init__(self) -> None:
        self.next = _Round(0)
        self.pending = False  # next holds a record
        self.current: _Round | None = None
        self.runner: gevent.Greenlet | None = None

    def covering(self) -> _Round | None:
        """The round that covers every record written so far; None when they are all synced."""
        return self.next if self.pending else self.current


class Syncable(Protocol):
    commits: QueueCommits | None

    def sync_data(self) -> None: ...


#: the longest a round waits for the publishers of the previous one to write again (they are usually back in
#: well under a millisecond; this bounds the wait when some of them have gone quiet)
GATHER_SECONDS = 0.004


class Acks:
    """When a publish may be answered OK; with ``durable``, runs each written queue's group commit rounds."""

    __slots__ = ("_active", "_failures", "_last_failure", "_recording", "_unhealthy", "durable", "writes")

    def __init__(self, sync_every: int, unhealthy: Callable[[Exception], None]) -> None:
        #: --sync-every=1: every write synced before its OK
        self.durable = sync_every <= 1
        self._unhealthy = unhealthy  # told of a failed round
        self._active: dict[QueueCommits, None] = {}  # the queues whose rounds are pending or running
        self._recording: list[_Round] | None = None  # the rounds the publish under way wrote into
        #: records written to disk queues so far (durable only)
        self.writes = 0
        self._failures = 0  # channel copies that could not be written (durable only), and the last error
        self._last_failure = ""

    # ---- a publish ------------------------------------------------------------------------------

    def begin(self) -> tuple[int, int, list[_Round]]:
        """Taken before a publish writes anything; hand it to settle() once the publish has written."""
        recording: list[_Round] = []
        self._recording = recording
        return self.writes, self._failures, recording

    def settle(self, begun: tuple[int, int, list[_Round]]) -> None:
        """Return when the publish that began at ``begun`` may be answered OK; BackendError when it must not: a
        round covering its writes failed, or one of its channel copies could not be written."""
        writes, failures, recording = begun
        precise = self._recording is recording
        if precise:
            self._recording = None
        if self.writes != writes:
            try:
                _wait_for(recording if precise else self._covering_all())
            except BackendError as err:
                self._unhealthy(err)
                raise
        if self._failures != failures:
            raise BackendError(self._last_failure)

    # ---- told by the writers ---------------------------------------------------------------------

    def written(self, queue: Syncable) -> None:
        """``queue`` got a record that must be made durable (called by DiskQueue.put when durable; never yields)."""
        commits = queue.commits
        if commits is None:
            commits = queue.commits = QueueCommits()
        commits.pending = True
        self.writes += 1
        recording = self._recording
        if recording is not None and commits.next not in recording:
            recording.append(commits.next)
        if commits.runner is None:
            self._active[commits] = None
            commits.runner = gevent.spawn(self._run, queue, commits)

    def failed(self, err: Exception) -> None:
        """A channel's copy could not be written: when durable, its publish must not be answered OK."""
        if self.durable:
            self._failures += 1
            self._last_failure = str(err)

    # ---- rounds ---------------------------------------------------------------------------------

    def wait(self) -> None:
        """Until the rounds covering every write made so far have returned; BackendError if a sync failed."""
        _wait_for(self._covering_all())

    def _covering_all(self) -> list[_Round]:
        return [r for r in (commits.covering() for commits in self._active) if r is not None]

    def _run(self, queue: Syncable, commits: QueueCommits) -> None:
        try:
            while commits.pending:
                upcoming = commits.next
                if upcoming.waiters < upcoming.expected:
                    upcoming.gathered.clear()  # a waiter may have set it against an older expectation
                    upcoming.gathered.wait(GATHER_SECONDS)
                else:
                    gevent.sleep(0)  # writers that are ready to run write first, and join this round
                commits.current, commits.pending = upcoming, False
                commits.next = _Round(upcoming.waiters)
                try:
                    queue.sync_data()
                except BackendError as err:
                    upcoming.error = str(err)
                finally:
                    commits.current = None
                    commits.next.expected = upcoming.waiters
                    upcoming.done.set()
        finally:
            commits.runner = None
            del self._active[commits]


def _wait_for(rounds: list[_Round]) -> None:
    """Count in as a waiter of every round first (a round gathers until its publishers are in), then wait."""
    for found in rounds:
        found.waiters += 1
        if found.waiters >= found.expected:
            found.gathered.set()
    error: str | None = None
    for found in rounds:
        found.done.wait()
        if error is None:
            error = found.error
    if error is not None:
        raise BackendError(error)
