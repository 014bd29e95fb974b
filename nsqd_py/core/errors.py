"""Errors the broker core raises; the front doors translate them into NSQ codes or HTTP statuses."""


class CoreError(Exception):
    """Base of the core's own errors."""


class ExitingError(CoreError):
    """The topic or channel is shutting down or being deleted."""

    def __init__(self) -> None:
        super().__init__("exiting")


class BackendError(Exception):
    """A disk-queue write or sync failed; the front doors answer E_PUB_FAILED, nsqd reports itself unhealthy."""


class MessageError(CoreError):
    """FIN/REQ/TOUCH of a message that is not in flight or not owned by the caller."""


class QueueFullError(CoreError):
    """A publish refused whole: it would put a channel with `channel_overflow=reject-publish` over its limit (the
    front doors answer E_PUB_FAILED, which keeps the connection, or HTTP 503)."""


class DrainingError(CoreError):
    """nsqd is draining (beyond nsqd: `--sigterm=drain`, `PUT /config/drain`): no new message, topic or channel. The
    front doors answer E_PUB_FAILED and the like, which keep the connection, or HTTP 503."""

    def __init__(self) -> None:
        super().__init__("nsqd is draining")
