"""A TCP client's row in /stats (nsqd's ClientV2Stats), built from what ClientV2 keeps.

Given to core/stats.py's snapshot by the /stats handler, so the core never reads TCP client fields.
"""

from __future__ import annotations

from typing import Any, Protocol

Stats = dict[str, Any]


class ClientLike(Protocol):
    """What a stats row reads from a TCP client (the tcp front door's ClientV2)."""

    client_id: str
    hostname: str
    remote_address: str
    state: int
    ready_count: int
    in_flight_count: int
    message_count: int
    finish_count: int
    requeue_count: int
    connect_ts: int
    sample_rate: int
    deflate: bool
    snappy: bool
    user_agent: str
    authed: bool
    auth_identity: str
    auth_identity_url: str
    topology_zone: str
    topology_region: str
    pub_counts: dict[str, int]
    tls: bool
    tls_cipher_suite: str
    tls_version: str
    tls_negotiated_protocol: str
    tls_negotiated_protocol_is_mutual: bool


def client_stats(client: ClientLike, topic_filter: str = "") -> Stats:
    """One client row, in ClientV2Stats' order, with its omitempty fields left out when empty."""
    row: Stats = {
        "client_id": client.client_id,
        "hostname": client.hostname,
        "version": "V2",
        "remote_address": client.remote_address,
        "state": client.state,
        "ready_count": client.ready_count,
        "in_flight_count": client.in_flight_count,
        "message_count": client.message_count,
        "finish_count": client.finish_count,
        "requeue_count": client.requeue_count,
        "connect_ts": client.connect_ts,
        "sample_rate": client.sample_rate,
        "deflate": client.deflate,
        "snappy": client.snappy,
        "user_agent": client.user_agent,
    }
    if client.authed:
        row["authed"] = True
    if client.auth_identity:
        row["auth_identity"] = client.auth_identity
    if client.auth_identity_url:
        row["auth_identity_url"] = client.auth_identity_url
    row["topology_zone"] = client.topology_zone
    row["topology_region"] = client.topology_region
    pub_counts = _first_pub_count(client.pub_counts, topic_filter)
    if pub_counts:
        row["pub_counts"] = pub_counts
    row["tls"] = client.tls
    row["tls_cipher_suite"] = client.tls_cipher_suite
    row["tls_version"] = client.tls_version
    row["tls_negotiated_protocol"] = client.tls_negotiated_protocol
    row["tls_negotiated_protocol_is_mutual"] = client.tls_negotiated_protocol_is_mutual
    return row


def _first_pub_count(pub_counts: dict[str, int], topic_filter: str) -> list[Stats]:
    """nsqd's loop `break`s after the first entry it keeps, so there is never more than one."""
    for topic, count in pub_counts.items():
        if not topic_filter or topic == topic_filter:
            return [{"topic": topic, "count": count}]
    return []
