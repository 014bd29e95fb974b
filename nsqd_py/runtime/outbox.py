"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Answers go out in one burst per event-loop turn (issue 23 for HTTP, issue 29 for TCP).

Each send to a client asleep in epoll wakes it on the other core, and on some VMs that wakeup, charged to our
send, costs as much as serving the request. A connection with something to send joins the outbox; the outbox
sends for all of them just before the loop polls again, after every ready connection was served, so most
answers find their client already awake. After the burst the loop polls for a moment before it sleeps
(`runtime/busy_poll.py`).
"""

from __future__ import annotations

from typing import Protocol

from gevent.hub import get_hub

from .busy_poll import BusyPoll, shared_busy_poll


class Pushable(Protocol):
    def push(self) -> None:
        """Send what is queued without blocking (called in the hub)."""


class Outbox:
    """The connections with answers written during this loop turn; sent just before the loop polls again.
    Make it in the thread of the hub that serves the connections."""

    __slots__ = ("_busy_poll", "_loop", "_waiting")

    def __init__(self) -> None:
        self._loop = get_hub().loop
        self._waiting: list[Pushable] = []
        self._busy_poll: BusyPoll = shared_busy_poll()

    def add(self, connection: Pushable) -> None:
        if not self._waiting:
            self._loop.run_callback(self._send_all)
        self._waiting.append(connection)

    def _send_all(self) -> None:
        waiting = self._waiting
        self._waiting = []
        for connection in waiting:
            connection.push()
        self._busy_poll.after_burst()
