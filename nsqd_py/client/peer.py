"""One nsqd a consumer subscribes on, and when to try it again while it is down: go-nsq's reconnect delay,
1 s doubling up to a cap, back to 1 s once connected. Shared by client/consumer.py and spark/consumer.py."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .connection import Connection


@dataclass(eq=False)
class PeerLink:
    address: str
    conn: Connection | None = None
    #: the connection's socket while it is registered with a selector (-1 while down)
    fd: int = -1
    retry_at: float = 0.0
    next_delay: float = 1.0

    def due(self, now: float) -> bool:
        """Down, and its retry time has come."""
        return self.conn is None and now >= self.retry_at

    def attach(self, conn: Connection) -> None:
        self.conn, self.fd, self.next_delay = conn, conn.fileno(), 1.0

    def detach(self) -> Connection | None:
        """Forget the connection (the caller closes it); None when there was none."""
        conn, self.conn, self.fd = self.conn, None, -1
        return conn

    def retry_later(self, cap: float) -> float:
        """Schedule the next attempt and return its delay in seconds; each call doubles the next one."""
        delay = min(self.next_delay, cap)
        self.retry_at = time.monotonic() + delay
        self.next_delay = min(delay * 2, cap)
        return delay
