"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

What a client's commands do to the broker, with nsqd's error answers: shared by connections served in the
broker's process (protocol.ProtocolV2) and those an I/O worker forwards (remote_clients.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gevent

from ..core.errors import BackendError, DrainingError, ExitingError, MessageError, QueueFullError
from .errors import ClientError, FatalClientError, client_text

if TYPE_CHECKING:
    from ..core.channel import Channel
    from ..core.consumer import Consumer
    from ..core.nsqd import NSQD

OK = b"OK"


def subscribe(nsqd: NSQD, client: Consumer, topic_name: str, channel_name: str) -> Channel:
    """Add the client to the channel (made on first use); FatalClientError E_SUB_FAILED when it cannot be, as for
    every failed SUB (beyond nsqd: a new topic or channel while nsqd drains)."""
    for attempt in (1, 2):
        try:
            channel = nsqd.client_topic(topic_name).get_channel(channel_name)
            channel.add_client(client)
        except (MessageError, BackendError, DrainingError) as err:
            raise FatalClientError("E_SUB_FAILED", f"SUB failed {err}") from None
        except ExitingError:
            if attempt == 1:
                gevent.sleep(0.1)  # an ephemeral topic/channel mid-deletion: try once more, like nsqd
                continue
            raise FatalClientError("E_SUB_FAILED", "SUB failed to deleted topic/channel") from None
        return channel
    raise AssertionError("unreachable")


def finish(channel: Channel, client: Consumer, msg_id: bytes) -> None:
    """FIN without refilling the client: the caller dispatches once after a run of FINs."""
    try:
        channel.finish(client, msg_id, dispatch=False)
    except MessageError as err:
        raise ClientError("E_FIN_FAILED", f"FIN {client_text(msg_id)} failed {err}") from None


def requeue(channel: Channel, client: Consumer, msg_id: bytes, delay_ms: int) -> None:
    try:
        channel.requeue(client, msg_id, delay_ms / 1000)
    except (MessageError, ExitingError) as err:
        raise ClientError("E_REQ_FAILED", f"REQ {client_text(msg_id)} failed {err}") from None


def touch(channel: Channel, client: Consumer, msg_id: bytes) -> None:
    try:
        channel.touch(client, msg_id)
    except MessageError as err:
        raise ClientError("E_TOUCH_FAILED", f"TOUCH {client_text(msg_id)} failed {err}") from None


def publish(nsqd: NSQD, topic_name: str, cmd: str, bodies: list[bytes], deferred_ms: int = 0) -> None:
    """PUB, DPUB or MPUB: returns once it may be answered OK; FatalClientError E_<cmd>_FAILED otherwise, or
    (beyond nsqd: a bounded channel or a drain refuses it) ClientError E_<cmd>_FAILED, which keeps the connection."""
    try:
        nsqd.client_topic(topic_name).publish(bodies, deferred_ms / 1000)
    except (QueueFullError, DrainingError) as err:
        raise ClientError(f"E_{cmd}_FAILED", f"{cmd} failed {err}") from None
    except (ExitingError, BackendError) as err:
        raise FatalClientError(f"E_{cmd}_FAILED", f"{cmd} failed {err}") from None


def create_topic(nsqd: NSQD, cmd: str, topic_name: str) -> None:
    """MPUB's topic, made before its body is read; none while nsqd drains (the MPUB is then refused whole)."""
    if nsqd.draining:
        return
    try:
        nsqd.get_topic(topic_name)
    except (ExitingError, BackendError) as err:
        raise FatalClientError(f"E_{cmd}_FAILED", f"{cmd} failed {err}") from None
