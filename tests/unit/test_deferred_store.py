"""The deferred store's entries (core/disk/deferred_store.py): what a load makes of whole, torn and corrupt files."""

from __future__ import annotations

import struct

from nsqd_py.core.disk.deferred_store import defer_entry, parse_entries, remove_entry


def _record(msg_id: bytes, body: bytes) -> bytes:
    return struct.pack(">qH", 1_700_000_000_000_000_000, 1) + msg_id + body


A, B = b"a" * 16, b"b" * 16


def test_defers_and_removals_leave_what_is_still_deferred() -> None:
    data = defer_entry(10, _record(A, b"x")) + defer_entry(20, _record(B, b"y")) + remove_entry(A)
    live: dict[bytes, tuple[int, bytes]] = {}
    assert parse_entries(data, live) == (3, None)
    assert live == {B: (20, _record(B, b"y"))}


def test_a_torn_tail_keeps_every_whole_entry_before_it() -> None:
    whole = defer_entry(10, _record(A, b"x"))
    torn = defer_entry(20, _record(B, b"y"))[:-3]
    live: dict[bytes, tuple[int, bytes]] = {}
    assert parse_entries(whole + torn, live) == (1, f"torn entry at {len(whole)}")
    assert list(live) == [A]


def test_a_corrupt_entry_stops_the_file_there() -> None:
    first = defer_entry(10, _record(A, b"x"))
    second = bytearray(defer_entry(20, _record(B, b"y")))
    second[-1] ^= 0xFF
    live: dict[bytes, tuple[int, bytes]] = {}
    assert parse_entries(first + bytes(second), live) == (1, f"corrupt entry at {len(first)}")
    assert list(live) == [A]
