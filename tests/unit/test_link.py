"""runtime/link.py on a socket pair: records arrive whole and in order however the bytes are cut into reads, a
record bigger than one read included, and each read's records are followed by one call of ``after_read``."""

from __future__ import annotations

import gevent
from gevent import socket as gsocket

from nsqd_py.runtime.link import HEADER, Link

RECORDS = [(1, 7, b""), (9, 1, b"topic\nbody"), (11, 2, bytes(range(256)) * 1200), (13, 3, b"x"), (21, 4, b"OK")]


def _wire(records: list[tuple[int, int, bytes]]) -> bytes:
    return b"".join(HEADER.pack(len(payload), kind, conn) + payload for kind, conn, payload in records)


def _read_all(pieces: list[bytes]) -> tuple[list[tuple[int, int, bytes]], int]:
    ours, theirs = gsocket.socketpair()
    link = Link(ours)
    got: list[tuple[int, int, bytes]] = []
    reads = [0]

    def after_read() -> None:
        reads[0] += 1

    reader = gevent.spawn(link.run, lambda kind, conn, payload: got.append((kind, conn, payload)), after_read)
    for piece in pieces:
        theirs.sendall(piece)
        gevent.sleep(0.001)  # each piece its own read
    theirs.close()
    reader.join(10)
    assert reader.dead
    link.close()
    return got, reads[0]


def test_records_cut_at_every_place_arrive_whole_and_in_order() -> None:
    wire = _wire(RECORDS[:2] + RECORDS[3:])
    pieces = [wire[i : i + 1] for i in range(len(wire))]  # one byte per read: every header and payload cut
    got, _ = _read_all(pieces)
    assert got == RECORDS[:2] + RECORDS[3:]


def test_a_record_bigger_than_one_read_arrives_whole() -> None:
    wire = _wire(RECORDS)
    assert len(RECORDS[2][2]) > 256 * 1024  # more than the link reads at once
    pieces = [wire[i : i + 10_000] for i in range(0, len(wire), 10_000)]
    got, reads = _read_all(pieces)
    assert got == RECORDS
    assert reads >= 2


def test_records_sent_together_are_handed_over_before_one_after_read() -> None:
    ours, theirs = gsocket.socketpair()
    link = Link(ours)
    events: list[object] = []
    reader = gevent.spawn(link.run, lambda kind, conn, payload: events.append(kind), lambda: events.append("read"))
    theirs.sendall(_wire(RECORDS[:2] + RECORDS[3:]))
    gevent.sleep(0.05)
    theirs.close()
    reader.join(10)
    link.close()
    assert events == [1, 9, 13, 21, "read"]
