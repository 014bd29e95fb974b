"""DeflateDecoder hands inflated bytes over when Go's flate reader does: at a sync flush's empty stored block, a
full 32 KiB window, the final block or an error (end to end against Go's answers: tests/security/test_hostile_input)."""

from __future__ import annotations

import zlib

import pytest

from nsqd_py.wire.compression import _MAX_OUTPUT, CodecError, DeflateDecoder

PUB = b"PUB t\n\x00\x00\x00\x05hello"


def flushes(*pieces: bytes, level: int = 6) -> list[bytes]:
    comp = zlib.compressobj(level, zlib.DEFLATED, -15)
    return [comp.compress(piece) + comp.flush(zlib.Z_SYNC_FLUSH) for piece in pieces]


def handed_over(decoder: DeflateDecoder, data: bytes) -> bytes:
    out = decoder.decode(data)
    while decoder.has_pending:
        out += decoder.decode(b"")
    return out


def test_whole_flushes_are_handed_over_at_once() -> None:
    decoder = DeflateDecoder()
    for piece, wire in zip([PUB, b"NOP\n", PUB * 50], flushes(PUB, b"NOP\n", PUB * 50), strict=True):
        assert decoder.decode(wire) == piece
        assert not decoder.has_pending


@pytest.mark.parametrize("level", [0, 6])
def test_the_bytes_before_a_marker_wait_for_all_of_it(level: int) -> None:
    first, second = flushes(PUB, b"NOP\nNOP\n", level=level)
    for cut in range(1, len(second) + 1):
        decoder = DeflateDecoder()
        assert decoder.decode(first) == PUB
        held = handed_over(decoder, second[:cut])
        assert held == (b"NOP\nNOP\n" if cut == len(second) else b""), cut
        if cut < len(second):  # a marker straddling two reads
            assert handed_over(decoder, second[cut:]) == b"NOP\nNOP\n"


def test_byte_by_byte() -> None:
    wire = b"".join(flushes(PUB, b"x" * 3000, PUB, level=1))
    decoder = DeflateDecoder()
    out = b"".join(handed_over(decoder, wire[i : i + 1]) for i in range(len(wire)))
    assert out == PUB + b"x" * 3000 + PUB


def test_00_00_ff_ff_in_a_stored_block_is_data() -> None:
    body = b"ab\x00\x00\xff\xffcd"
    (wire,) = flushes(PUB + body, level=0)
    end = wire.index(b"\x00\x00\xff\xffcd") + 4
    decoder = DeflateDecoder()
    assert handed_over(decoder, wire[:end]) == b""  # the stored block goes on: nothing handed over yet
    assert handed_over(decoder, wire[end:]) == PUB + body


def test_a_full_window_is_handed_over_without_a_marker() -> None:
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = b"NOP\n" * 10_000
    wire = comp.compress(data) + comp.flush(zlib.Z_BLOCK)
    decoder = DeflateDecoder()
    assert handed_over(decoder, wire) == data[:32768]
    assert decoder.finish() == data[32768:]  # the input ends: everything inflated so far


def test_the_final_block_hands_everything_over() -> None:
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    decoder = DeflateDecoder()
    assert handed_over(decoder, comp.compress(PUB) + comp.flush()) == PUB
    assert decoder.ended and not decoder.has_pending
    assert decoder.decode(b"trailing garbage") == b""


def test_corrupt_input_hands_over_what_it_inflated_before() -> None:
    first, second = flushes(PUB, b"NOP\nhello\n")
    decoder = DeflateDecoder()
    assert decoder.decode(first) == PUB
    assert decoder.decode(second[:-4]) == b""  # held: no marker yet
    with pytest.raises(CodecError) as broken:
        decoder.decode(b"\xff\xff\xff\xff")  # the stored block of the marker with LEN == NLEN
    assert broken.value.partial == b"NOP\nhello\n"


def test_a_bomb_comes_out_in_capped_pieces() -> None:
    (wire,) = flushes(b"\0" * (5 << 20))
    decoder = DeflateDecoder()
    pieces = [decoder.decode(wire)]
    while decoder.has_pending:
        pieces.append(decoder.decode(b""))
    assert max(map(len, pieces)) <= _MAX_OUTPUT
    assert sum(map(len, pieces)) == 5 << 20
