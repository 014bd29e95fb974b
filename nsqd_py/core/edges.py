"""What core/ needs from the parts around it, as protocols (Go's nsqd names the same edges `BackendQueue`
and `Client`): a topic's or channel's backend queue, and a connected client as NSQD lists it for /stats.

What the broker needs of a client is these two and no more: this `Client` protocol (every connection, producer or
consumer) and the base class `consumer.Consumer` (a channel's subscribers: a base class because the hot path reads
their counters directly). The TCP front door's one implementation of both is `tcp/client_state.ClientState`, whose
fields are the table in `tcp/client_fields.py`."""

from __future__ import annotations

from typing import Protocol


class BackendQueue(Protocol):
    """Where messages go when memory is full: a DiskQueue, or DummyBackend for #ephemeral topics/channels."""

    def put(self, data: bytes) -> None: ...

    def put_many(self, records: list[bytes]) -> None:
        """`put` for each, in order (fewer writes)."""

    def read_one(self) -> tuple[bytes, object] | None:
        """The next record and the token that acks it, None when empty."""

    def peek(self, limit: int) -> list[bytes]:
        """Up to ``limit`` of the next records read_one would return, changing nothing."""

    def ack(self, token: object) -> None: ...

    def depth(self) -> int: ...

    def unread_bytes(self) -> int:
        """The unread records' sizes summed."""

    def sync(self) -> None: ...

    def empty(self) -> None: ...

    def delete(self) -> None: ...

    def close(self) -> None: ...


class Client(Protocol):
    """A connected client (producer or consumer) as NSQD keeps it: /stats lists those that have published."""

    #: messages published, by topic name
    pub_counts: dict[str, int]
