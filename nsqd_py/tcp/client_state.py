"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

What nsqd keeps of a protocol V2 client wherever its socket is served: the fields of client_fields.FIELDS (its
identity and what /stats shows of it), its channel, and the delivery state a channel reads (`Consumer`). A
connection served in this process is a `client.ClientV2`; one an I/O worker serves is the broker's
`remote_clients.RemoteClient`. The typed declarations below are what mypyc compiles; the table is the source of
truth and tests/unit/test_client_fields.py fails when they differ."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..core.consumer import TOPOLOGY_GLOBAL, TOPOLOGY_REGION, TOPOLOGY_ZONE, Consumer
from .client_fields import STATE_FIELDS, STATE_SLOTS

if TYPE_CHECKING:
    from ..core.channel import Channel


class ClientState(Consumer):
    __slots__ = STATE_SLOTS

    # ---- client_fields.STATE_FIELDS, in the table's order ----
    client_id: str
    hostname: str
    remote_address: str
    connect_ts: int
    deflate: bool
    snappy: bool
    user_agent: str
    authed: bool
    auth_identity: str
    auth_identity_url: str
    topology_zone: str
    topology_region: str
    #: messages published, by topic name
    pub_counts: dict[str, int]
    tls: bool
    tls_cipher_suite: str
    tls_version: str
    tls_negotiated_protocol: str
    tls_negotiated_protocol_is_mutual: bool

    def __init__(self, client_id: int, remote_address: str, msg_timeout: float) -> None:
        super().__init__()
        for field in STATE_FIELDS:
            if field.default is not None:  # None: a container, made below (a default would be shared)
                setattr(self, field.attr, field.default)
        self.id = client_id
        self.remote_address = remote_address
        host = remote_address.rsplit(":", 1)[0] if ":" in remote_address else remote_address
        self.client_id = host
        self.hostname = host
        self.connect_ts = int(time.time())
        self.msg_timeout = msg_timeout
        self.channel: Channel | None = None
        self.pub_counts = {}

    def topology_of(self, zone: str, region: str) -> int:
        # Go master compares the two as they are: a client and an nsqd that both leave a zone unset are zone-local
        if self.topology_zone == zone:
            return TOPOLOGY_ZONE
        return TOPOLOGY_REGION if self.topology_region == region else TOPOLOGY_GLOBAL

    def published(self, topic: str, count: int) -> None:
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count
