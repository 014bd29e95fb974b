"""Snappy (framing format) and raw DEFLATE stream codecs for IDENTIFY's compression upgrades."""

from __future__ import annotations

import zlib

import cramjam

_SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"
#: at most this many decompressed bytes per read, so a compression bomb cannot balloon memory
_MAX_OUTPUT = 64 * 1024
#: a snappy chunk holds at most 64 KiB of data; anything much longer is not a sane stream
_MAX_SNAPPY_CHUNK = 128 * 1024


class CodecError(Exception):
    """Corrupt compressed input; ``partial`` is what decoded before it (Go's readers hand that over first)."""

    def __init__(self, reason: str, partial: bytes = b"") -> None:
        super().__init__(reason)
        self.partial = partial


class SnappyDecoder:
    """Turns a snappy framed stream into bytes, chunk by chunk (CRCs checked by cramjam)."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def decode(self, data: bytes) -> bytes:
        buf = self._pending
        buf += data
        pos = 0
        end = len(buf)
        while pos + 4 <= end:
            length = int.from_bytes(buf[pos + 1 : pos + 4], "little")
            if length > _MAX_SNAPPY_CHUNK:
                raise CodecError(f"snappy: chunk too long ({length})")
            if pos + 4 + length > end:
                break
            pos += 4 + length
        if pos == 0:
            return b""
        chunks = bytes(buf[:pos])
        del buf[:pos]
        try:
            return bytes(cramjam.snappy.decompress(_SNAPPY_STREAM_ID + chunks))
        except cramjam.DecompressionError as err:
            raise CodecError(f"snappy: corrupt input - {err}", _good_snappy_chunks(chunks)) from None


def _good_snappy_chunks(chunks: bytes) -> bytes:
    """The data of the chunks before the first corrupt one."""
    out = []
    pos = 0
    while pos < len(chunks):
        end = pos + 4 + int.from_bytes(chunks[pos + 1 : pos + 4], "little")
        try:
            out.append(bytes(cramjam.snappy.decompress(_SNAPPY_STREAM_ID + chunks[pos:end])))
        except cramjam.DecompressionError:
            break
        pos = end
    return b"".join(out)


def snappy_encode(data: bytes) -> bytes:
    """One self-contained framed stream per flush (a repeated stream identifier is allowed)."""
    return bytes(cramjam.snappy.compress(data))


class DeflateEncoder:
    def __init__(self, level: int) -> None:
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)

    def encode(self, data: bytes) -> bytes:
        """Raw DEFLATE with a sync flush, as nsqd's flate writer does at every flush."""
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)


class DeflateDecoder:
    def __init__(self) -> None:
        self._decompressor = zlib.decompressobj(-15)

    @property
    def has_pending(self) -> bool:
        """Compressed input not turned into output yet (output was capped)."""
        return bool(self._decompressor.unconsumed_tail)

    @property
    def ended(self) -> bool:
        """The stream's final block was read: nothing after it is data (Go's flate reader says EOF)."""
        return self._decompressor.eof

    def decode(self, data: bytes) -> bytes:
        source = self._decompressor.unconsumed_tail + data
        before = self._decompressor.copy()
        try:
            return self._decompressor.decompress(source, _MAX_OUTPUT)
        except zlib.error as err:
            raise CodecError(f"flate: corrupt input - {err}", _decodable_prefix(before, source)) from None


def _decodable_prefix(decompressor: zlib._Decompress, source: bytes) -> bytes:
    """What ``source`` decodes to before its corrupt byte, fed a byte at a time."""
    out = []
    try:
        for i in range(len(source)):
            piece = source[i : i + 1]
            while piece and not decompressor.eof:
                out.append(decompressor.decompress(piece, _MAX_OUTPUT))
                piece = decompressor.unconsumed_tail
    except zlib.error:
        pass
    return b"".join(out)
