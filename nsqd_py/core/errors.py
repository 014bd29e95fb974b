"""Errors the broker core raises; the front doors translate them into NSQ codes or HTTP statuses."""

from .diskqueue import BackendError  # defined in diskqueue.py until it imports it from here (issue 15)

__all__ = ["BackendError", "CoreError", "ExitingError", "MessageError"]


class CoreError(Exception):
    """Base of the core's own errors."""


class ExitingError(CoreError):
    """The topic or channel is shutting down or being deleted."""

    def __init__(self) -> None:
        super().__init__("exiting")


class MessageError(CoreError):
    """FIN/REQ/TOUCH of a message that is not in flight or not owned by the caller."""
