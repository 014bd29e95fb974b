"""A publisher to one nsqd: thread-safe, checks every reply, reconnects when the connection breaks."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .connection import DEFAULT_USER_AGENT, Connection
from .errors import NSQConnectionError, ServerError

#: seconds without a reply after which a publish first looks whether nsqd closed the idle connection
_IDLE_CHECK_AFTER = 1.0


class Producer:
    """PUB/MPUB/DPUB to ``address`` over one lazily opened connection.

    A broken connection is replaced and the command retried up to ``retries`` times (waiting ``retry_delay``,
    doubling). A retry after a send whose reply was lost can publish twice: NSQ is at-least-once anyway.
    Error frames raise `ServerError` at once (no retry); the connection is reopened on the next call.
    """

    def __init__(
        self,
        address: str,
        *,
        identify: Mapping[str, Any] | None = None,
        tls_context: ssl.SSLContext | None = None,
        timeout: float = 5.0,
        retries: int = 2,
        retry_delay: float = 0.5,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> None:
        self.address = address
        self.identify_fields = dict(identify or {})
        self.tls_context = tls_context
        self.timeout = timeout
        self.retries = retries
        self.retry_delay = retry_delay
        self.user_agent = user_agent
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._answered_at = 0.0  # monotonic time of the last reply: a busy connection needs no idle check

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        """Open the connection now (otherwise the first publish does); NSQConnectionError on failure."""
        with self._lock:
            self._connection()

    def pub(self, topic: str, body: bytes) -> None:
        self._call(lambda conn: conn.pub(topic, body))

    def mpub(self, topic: str, bodies: list[bytes]) -> None:
        self._call(lambda conn: conn.mpub(topic, bodies))

    def dpub(self, topic: str, delay_ms: int, body: bytes) -> None:
        self._call(lambda conn: conn.dpub(topic, delay_ms, body))

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _call(self, publish: Callable[[Connection], None]) -> None:
        with self._lock:
            for attempt in range(self.retries + 1):
                try:
                    publish(self._connection())
                    self._answered_at = time.monotonic()
                    return
                except ServerError as err:
                    if err.fatal:
                        self._drop()
                    raise
                except NSQConnectionError as err:
                    self._drop()
                    if attempt == self.retries:
                        raise NSQConnectionError(f"{err} (gave up after {attempt + 1} attempts)") from err
                    time.sleep(self.retry_delay * 2**attempt)

    def _connection(self) -> Connection:
        """The open connection. After an idle second, heartbeats that arrived meanwhile are answered first, and a
        connection that nsqd closed (idle longer than two heartbeat intervals) is noticed before anything is sent;
        a publisher in a loop skips that look (one poll of the socket per publish)."""
        conn = self._conn
        if conn is not None and time.monotonic() - self._answered_at < _IDLE_CHECK_AFTER:
            return conn
        if conn is not None:
            try:
                while conn.read_frame(0) is not None:
                    pass  # nothing but heartbeats is expected on an idle publisher
                return conn
            except NSQConnectionError:
                self._drop()
        conn = Connection(self.address, timeout=self.timeout, tls_context=self.tls_context,
                          user_agent=self.user_agent)
        conn.connect()
        try:
            conn.identify(**self.identify_fields)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
