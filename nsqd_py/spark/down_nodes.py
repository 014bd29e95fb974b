"""The nsqd that executor tasks could not connect to, as the driver learns it from the slices' ends.

The driver's `/stats` survey can reach an nsqd whose TCP port the executors cannot (a firewall between the
executors and nsqd, a TCP listener down, a node restarting): planning slices for it every trigger would run empty
batches without end. Such a node is planned again only after a pause that doubles with each batch that could not
reach it (up to a minute), and the query progress lists it until a task reaches it again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

_FIRST_PAUSE = 1.0
_LONGEST_PAUSE = 60.0


@dataclass
class _Down:
    since: float
    batches: int
    retry_at: float


class DownNodes:
    """nsqd TCP addresses that the last batches' tasks could not reach."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Down] = {}

    def report(self, nsqd: str, unreachable: bool) -> None:
        """A finished slice of ``nsqd`` could (not) connect."""
        if not unreachable:
            self.nodes.pop(nsqd, None)
            return
        down = self.nodes.get(nsqd) or _Down(time.time(), 0, 0.0)
        down.batches += 1
        down.retry_at = time.monotonic() + min(_LONGEST_PAUSE, _FIRST_PAUSE * 2 ** (down.batches - 1))
        self.nodes[nsqd] = down

    def may_plan(self, nsqd: str) -> bool:
        down = self.nodes.get(nsqd)
        return down is None or time.monotonic() >= down.retry_at

    def progress(self) -> dict[str, dict[str, object]]:
        """For the query progress: since when each node is unreachable from the executors, and for how many
        batches."""
        return {nsqd: {"since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(down.since)),
                       "batches": down.batches}
                for nsqd, down in sorted(self.nodes.items())}
