"""Snappy (framing format) and raw DEFLATE stream codecs for IDENTIFY's compression upgrades."""

from __future__ import annotations

import zlib

import cramjam

_SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"
#: at most this many decompressed bytes per read, so a compression bomb cannot balloon memory
_MAX_OUTPUT = 64 * 1024
#: a snappy block holds at most 64 KiB
_MAX_BLOCK = 65536
#: Go's reader refuses a chunk longer than its buffer: the longest encoding of a 64 KiB block, plus the checksum
_MAX_SNAPPY_CHUNK = 32 + _MAX_BLOCK + _MAX_BLOCK // 6 + 4
_CHUNK_COMPRESSED, _CHUNK_UNCOMPRESSED, _CHUNK_STREAM_ID = 0x00, 0x01, 0xFF


class CodecError(Exception):
    """Corrupt compressed input; ``partial`` is what decoded before it (Go's readers hand that over first)."""

    def __init__(self, reason: str, partial: bytes = b"") -> None:
        super().__init__(reason)
        self.partial = partial


class SnappyDecoder:
    """Turns a snappy framed stream into bytes, chunk by chunk (CRCs checked by cramjam), the way Go's reader
    (golang/snappy) takes it: a chunk's header alone can break the stream (it must begin with the stream
    identifier; a length over Go's buffer, a reserved unskippable type or an impossible length is refused as soon as
    the header is read), and whatever the chunks before a broken one decode to is handed over before the error."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._started = False

    def decode(self, data: bytes) -> bytes:
        buf = self._pending
        buf += data
        pos = 0
        end = len(buf)
        broken = ""
        while pos + 4 <= end:
            broken = self._bad_header(buf[pos], int.from_bytes(buf[pos + 1 : pos + 4], "little"))
            if broken:
                break
            self._started = True
            stop = pos + 4 + int.from_bytes(buf[pos + 1 : pos + 4], "little")
            if stop > end:
                break
            pos = stop
        chunks = bytes(buf[:pos])
        del buf[:pos]
        out = b""
        if chunks:
            try:
                out = bytes(cramjam.snappy.decompress(_SNAPPY_STREAM_ID + chunks))
            except cramjam.DecompressionError as err:
                raise CodecError(f"snappy: corrupt input - {err}", _good_snappy_chunks(chunks)) from None
        if broken:
            raise CodecError(broken, out)
        return out

    def _bad_header(self, kind: int, length: int) -> str:
        """Go's reader's verdict on a chunk header before it reads the chunk ("" when it reads on)."""
        if not self._started and kind != _CHUNK_STREAM_ID:
            return "snappy: corrupt input (no stream identifier)"
        if length > _MAX_SNAPPY_CHUNK:
            return f"snappy: unsupported input (chunk length {length})"
        if kind in (_CHUNK_COMPRESSED, _CHUNK_UNCOMPRESSED) and length < 4:
            return f"snappy: corrupt input (chunk length {length})"
        if kind == _CHUNK_UNCOMPRESSED and length - 4 > _MAX_BLOCK:
            return f"snappy: corrupt input (uncompressed chunk of {length - 4} bytes)"
        if kind == _CHUNK_STREAM_ID and length != 6:
            return f"snappy: corrupt input (stream identifier of {length} bytes)"
        if 0x02 <= kind <= 0x7F:
            return f"snappy: unsupported input (reserved chunk type {kind:#x})"
        return ""


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
