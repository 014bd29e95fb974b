"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

What a channel needs from a subscribed client; the TCP front door implements it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from .message import Message

# Client states as nsqd numbers them (they appear as `state` in /stats).
STATE_INIT: Final = 0
STATE_DISCONNECTED: Final = 1
STATE_CONNECTED: Final = 2
STATE_SUBSCRIBED: Final = 3
STATE_CLOSING: Final = 4

# How near a client is to nsqd, for topology-aware consumption (nsqd master): the channel prefers the nearest.
TOPOLOGY_GLOBAL: Final = 0
TOPOLOGY_REGION: Final = 1
TOPOLOGY_ZONE: Final = 2


@mypyc_attr(allow_interpreted_subclasses=True)  # mypyc: a unit test subclasses it (CONTRIBUTING.md)
class Consumer:
    """Per-client delivery state the channel reads and updates directly (hot path: plain attributes).

    Subclasses implement :meth:`send_message` (queue a message frame for writing; never block)
    and :meth:`close` (drop the connection, used when its channel is deleted).
    """

    __slots__ = (
        "finish_count",
        "in_flight_count",
        "message_count",
        "msg_timeout",
        "ready_count",
        "requeue_count",
        "sample_rate",
        "state",
        "topology",
    )

    def __init__(self) -> None:
        self.state = STATE_INIT
        self.ready_count = 0
        self.in_flight_count = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        #: seconds a delivered message may stay un-FINed before the channel requeues it
        self.msg_timeout = 60.0
        #: 0 = every message; 1..99 = deliver roughly that percentage, drop the rest
        self.sample_rate = 0
        #: with topology-aware consumption, how near nsqd its channel found it at SUB (TOPOLOGY_*)
        self.topology = TOPOLOGY_GLOBAL

    def is_ready(self) -> bool:
        return self.state == STATE_SUBSCRIBED and self.in_flight_count < self.ready_count

    def topology_of(self, zone: str, region: str) -> int:
        """How near this client says it is to an nsqd in ``zone`` and ``region`` (TOPOLOGY_*): as Go master's
        messagePump judges it, the same zone, else the same region, else global."""
        return TOPOLOGY_GLOBAL

    def send_message(self, msg: Message) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
