"""nsqlookupd's registration DB: which producers (nsqd nodes) registered which topics and channels.

A registration is (category, key, subkey): `("client", "", "")` for every identified nsqd, `("topic", t, "")`
and `("channel", t, c)`. Each maps producer ids (the nsqd's remote `ip:port`) to a Producer; a registration can
exist with no producers (created over HTTP, or left behind after its producers went away). `*` as key or subkey
matches anything. Everything runs in gevent greenlets, so no locking is needed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: Go's `time.Time{}.UnixNano()` (year 1 overflows int64): /debug's `tombstoned_at` for a live producer
ZERO_TIME_UNIX_NANO = -6795364578871345152


@dataclass(frozen=True, slots=True)
class Registration:
    category: str
    key: str
    subkey: str

    def is_match(self, category: str, key: str, subkey: str) -> bool:
        return (category == self.category and key in ("*", self.key) and subkey in ("*", self.subkey))


@dataclass(slots=True, eq=False)
class PeerInfo:
    """An identified nsqd, shared by all of its registrations; JSON fields in nsqlookupd's order."""

    id: str
    remote_address: str = ""
    hostname: str = ""
    broadcast_address: str = ""
    tcp_port: int = 0
    http_port: int = 0
    version: str = ""
    topology_zone: str = ""
    topology_region: str = ""
    #: unix ns of its IDENTIFY or last PING
    last_update: int = field(default_factory=time.time_ns)

    def to_json(self) -> dict[str, Any]:
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
            "topology_zone": self.topology_zone,
            "topology_region": self.topology_region,
        }


@dataclass(slots=True, eq=False)
class Producer:
    """One peer in one registration; a tombstone hides it from /lookup for --tombstone-lifetime."""

    peer: PeerInfo
    tombstoned: bool = False
    tombstoned_at: int = ZERO_TIME_UNIX_NANO

    def tombstone(self) -> None:
        self.tombstoned = True
        self.tombstoned_at = time.time_ns()

    def is_tombstoned(self, lifetime_ns: int) -> bool:
        return self.tombstoned and time.time_ns() - self.tombstoned_at < lifetime_ns


class RegistrationDB:
    def __init__(self) -> None:
        self.registrations: dict[Registration, dict[str, Producer]] = {}

    def add_registration(self, key: Registration) -> None:
        self.registrations.setdefault(key, {})

    def add_producer(self, key: Registration, peer: PeerInfo) -> bool:
        """True when the peer was not registered there yet."""
        producers = self.registrations.setdefault(key, {})
        if peer.id in producers:
            return False
        producers[peer.id] = Producer(peer)
        return True

    def remove_producer(self, key: Registration, peer_id: str) -> tuple[bool, int]:
        """(removed?, producers left); the registration itself stays, even when empty."""
        producers = self.registrations.get(key)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, key: Registration) -> None:
        self.registrations.pop(key, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if key != "*" and subkey != "*":
            wanted = Registration(category, key, subkey)
            return [wanted] if wanted in self.registrations else []
        return [r for r in self.registrations if r.is_match(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """The producers of every matching registration, one per peer."""
        seen: dict[str, Producer] = {}
        for registration in self.find_registrations(category, key, subkey):
            for peer_id, producer in self.registrations[registration].items():
                seen.setdefault(peer_id, producer)
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        return [r for r, producers in self.registrations.items() if peer_id in producers]


def keys(registrations: Iterable[Registration]) -> list[str]:
    return [r.key for r in registrations]


def subkeys(registrations: Iterable[Registration]) -> list[str]:
    return [r.subkey for r in registrations]


def filter_by_active(producers: Iterable[Producer], inactive_ns: int, tombstone_lifetime_ns: int) -> list[Producer]:
    """Producers that pinged within ``inactive_ns`` and are not tombstoned."""
    now = time.time_ns()
    return [p for p in producers
            if now - p.peer.last_update <= inactive_ns and not p.is_tombstoned(tombstone_lifetime_ns)]
