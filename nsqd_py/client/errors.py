"""The exceptions the client raises; all derive from `NSQError`."""

from __future__ import annotations

#: error codes nsqd sends without closing the connection (everything else is fatal)
NON_FATAL_CODES = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})


class NSQError(Exception):
    """Base class of every client error."""


class NSQConnectionError(NSQError):
    """Could not connect, or the connection broke (EOF, reset, timeout); the connection is unusable."""


class ProtocolError(NSQError):
    """nsqd sent something this client did not expect (bad frame, a message where a reply was due)."""


class ServerError(NSQError):
    """An error frame from nsqd, e.g. `E_BAD_TOPIC PUB topic name "a b" is not valid`."""

    def __init__(self, payload: str) -> None:
        super().__init__(payload)
        self.code, _, self.description = payload.partition(" ")

    @property
    def fatal(self) -> bool:
        """nsqd closes the connection after a fatal error."""
        return self.code not in NON_FATAL_CODES


class HTTPError(NSQError):
    """An HTTP call to nsqd or nsqlookupd failed (unreachable, non-200 status or bad JSON)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
