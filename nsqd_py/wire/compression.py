"""Snappy (framing format) and raw DEFLATE stream codecs for IDENTIFY's compression upgrades."""

from __future__ import annotations

import contextlib
import zlib
from collections import deque

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
    the header is read, an uncompressed chunk too long for a block once its checksum is), and whatever the chunks
    before a broken one decode to is handed over before the error."""

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
            broken = self._bad_header(buf[pos], int.from_bytes(buf[pos + 1 : pos + 4], "little"), end - pos - 4)
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

    def _bad_header(self, kind: int, length: int, available: int) -> str:
        """Go's reader's verdict on a chunk header before it reads the chunk, of which ``available`` bytes are
        here ("" when it reads on)."""
        if not self._started and kind != _CHUNK_STREAM_ID:
            return "snappy: corrupt input (no stream identifier)"
        if length > _MAX_SNAPPY_CHUNK:
            return f"snappy: unsupported input (chunk length {length})"
        if kind in (_CHUNK_COMPRESSED, _CHUNK_UNCOMPRESSED) and length < 4:
            return f"snappy: corrupt input (chunk length {length})"
        if kind == _CHUNK_UNCOMPRESSED and length - 4 > _MAX_BLOCK and available >= 4:  # after its checksum
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


#: a sync flush's empty stored block as it is byte-aligned on the wire: LEN 0, NLEN 0xffff
_SYNC_MARKER = b"\x00\x00\xff\xff"
#: Go's flate reader hands its window over whenever it is full
_WINDOW = 32 * 1024
#: an empty stored block, then an empty final block: read from a block boundary they end the stream exactly; from
#: anywhere else (inside a block or a block's header) practically never
_BOUNDARY_PROBE = b"\x00\x00\x00\xff\xff\x03\x00"


class DeflateDecoder:
    """Turns a raw DEFLATE stream into bytes when Go's flate reader would hand them over, which is not as soon as
    they are inflated: only at a sync flush's empty stored block (``00 00 ff ff`` on the wire), when its 32 KiB
    window is full, at the end of the final block, and when the stream breaks (then all it inflated before the
    corrupt bits, then the error). Bytes inflated after the last of these are held meanwhile, so a command whose
    flush marker never arrives is not acted on, as in Go, whose reader is still waiting for the marker.

    zlib does the inflating. ``00 00 ff ff`` in the input ends an empty stored block when zlib, fed those four
    bytes on their own, inflates nothing from them and then stands at a block boundary (asked of a copy of it);
    otherwise they are data (a stored block's, say). Only the last such candidate of a read is tried unless it
    fails, and one may straddle two reads. At a block boundary the decompressor is nothing but its window, so the
    state a broken read is inflated again from is rebuilt from the last 32 KiB handed over, not copied."""

    def __init__(self) -> None:
        self._decompressor = zlib.decompressobj(-15)
        self._input = b""  # received, not fed to zlib yet (the output cap was reached)
        self._fed_tail = b""  # the beginning of a marker last fed to zlib, on its own, inflating nothing
        self._held: list[bytes] = []  # inflated, not handed over yet
        self._held_size = 0
        self._total = 0  # bytes inflated so far
        self._more = False  # zlib may still hold output for the input fed (it stopped at the cap)
        self._at_marker = True  # nothing fed since the start or since the end of a marker
        self._history: deque[bytes] = deque()  # what was handed over: its last 32 to 40 KiB
        self._history_size = 0

    @property
    def has_pending(self) -> bool:
        """Input not inflated yet because output was capped: ``decode(b"")`` goes on with it."""
        return (bool(self._input) or self._more) and not self._decompressor.eof

    @property
    def ended(self) -> bool:
        """The stream's final block was read: nothing after it is data (Go's flate reader says EOF)."""
        return self._decompressor.eof

    def finish(self) -> bytes:
        """The input ended (EOF) before the final block: what Go's reader hands over then, everything inflated so
        far (with io.ErrUnexpectedEOF). Call it once ``has_pending`` is False; the stream is over after it."""
        held = b"".join(self._held)
        self._held, self._held_size = [], 0
        return held

    def decode(self, data: bytes) -> bytes:
        """What Go's reader hands over once it has read ``data`` too (at most ``_MAX_OUTPUT`` bytes; the rest
        follows from ``decode(b"")`` while ``has_pending``)."""
        decompressor = self._decompressor
        if decompressor.eof:
            return b""
        if self._at_marker and not self._input and data.endswith(_SYNC_MARKER):  # the usual read: whole flushes
            try:
                out = decompressor.decompress(data[:-4], _MAX_OUTPUT)
                quiet = (len(out) < _MAX_OUTPUT and not decompressor.unconsumed_tail and not decompressor.eof
                         and not decompressor.decompress(_SYNC_MARKER, _MAX_OUTPUT) and not decompressor.eof)
            except zlib.error as err:
                raise CodecError(f"flate: corrupt input - {err}", _decodable_prefix(self._rebuilt(), data)) from None
            if quiet and _at_block_boundary(decompressor):
                self._total += len(out)
                if out:
                    history = self._history
                    history.append(out)
                    self._history_size += len(out)
                    if self._history_size > _WINDOW + _WINDOW // 4:
                        self._trim_history()
                return out
            self._decompressor = self._rebuilt()  # not so usual after all: again, the long way
        source = self._input + data if self._input else data
        self._input = b""
        before = None if self._at_marker else self._decompressor.copy()
        state = self._held[:], self._held_size, self._total, self._fed_tail, self._more, self._at_marker
        try:
            released = self._inflate(source, True)
            if released is None:  # the last 00 00 ff ff was no marker: again from the start, trying each one
                self._decompressor = self._rebuilt() if before is None else before.copy()
                held, self._held_size, self._total, self._fed_tail, self._more, self._at_marker = state
                self._held = held[:]
                released = self._inflate(source, False)
        except zlib.error as err:
            partial = b"".join(state[0]) + _decodable_prefix(self._rebuilt() if before is None else before, source)
            self._held, self._held_size = [], 0
            raise CodecError(f"flate: corrupt input - {err}", partial) from None
        assert released is not None
        if released:
            self._remember(released)
        return released

    def _inflate(self, source: bytes, last_only: bool) -> bytes | None:
        """Feeds ``source`` (up to the output cap), each candidate for a marker on its own, handing over what
        precedes a true one; returns what is handed over. When ``last_only`` the only candidate tried is the last
        one, and None says it was no marker."""
        decompressor, carried, feed = self._decompressor, self._fed_tail, self._feed
        released: list[bytes] = []
        budget = _MAX_OUTPUT - self._held_size
        stopped = False
        if self._more:
            inflated, stopped = feed(b"", budget)
            budget -= len(inflated)
        pos = 0
        if not stopped:
            for start, end in _marker_candidates(carried, source, last_only):
                if start > pos:
                    inflated, stopped = feed(source[pos:start], budget)
                    budget -= len(inflated)
                    pos = start
                    if stopped:
                        break
                inflated, stopped = feed(source[pos:end], budget)  # the candidate (or the rest of it) on its own
                budget -= len(inflated)
                pos = end
                if stopped:
                    break
                if not inflated and _at_block_boundary(decompressor):
                    released += self._held
                    self._held, self._held_size, self._at_marker = [], 0, True
                elif last_only:
                    return None
        if not stopped and pos < len(source):
            begun = b""
            if source[-1] in (0x00, 0xFF):  # the beginning of a marker at the end is fed on its own, to know
                # whether it inflates anything (it may go on from the one fed last time if nothing was fed since)
                last = (carried + source)[-3:] if pos == 0 and len(source) < 3 else source[max(pos, len(source) - 3) :]
                begun = last[len(last) - _marker_begun(last) :]
            cut = max(pos, len(source) - len(begun))
            if cut > pos:
                inflated, stopped = feed(source[pos:cut], budget)
                budget -= len(inflated)
                pos = cut
            if not stopped and pos < len(source):
                pos = len(source)
                inflated, stopped = feed(source[cut:], budget)
                if not inflated and not stopped:
                    self._fed_tail = begun
        if decompressor.eof:
            released += self._held
            self._held, self._held_size = [], 0
        else:
            self._input = decompressor.unconsumed_tail + source[pos:]
            full = self._held_size - self._total % _WINDOW  # the bytes of windows filled since the last hand-over
            if full > 0:
                held = b"".join(self._held)
                released.append(held[:full])
                self._held, self._held_size = ([held[full:]] if full < len(held) else []), len(held) - full
        return b"".join(released)

    def _feed(self, data: bytes, budget: int) -> tuple[bytes, bool]:
        """Inflates ``data`` into the held bytes, at most ``budget`` of them (the input left over stays in zlib's
        unconsumed tail); returns them, and whether zlib stopped short (the output cap, or the final block)."""
        decompressor = self._decompressor
        inflated = decompressor.decompress(data, budget)
        if data:
            self._at_marker = False
            self._fed_tail = b""
        size = len(inflated)
        if size:
            self._held.append(inflated)
            self._held_size += size
            self._total += size
        self._more = more = size == budget
        return inflated, more or decompressor.eof or bool(decompressor.unconsumed_tail)

    def _remember(self, released: bytes) -> None:
        """Keeps the last 32 KiB handed over (a decompressor at a marker is rebuilt from them)."""
        self._history.append(released)
        self._history_size += len(released)
        if self._history_size > _WINDOW + _WINDOW // 4:
            self._trim_history()

    def _trim_history(self) -> None:
        """Down to the last 32 KiB (what Go keeps in its window too)."""
        history = self._history
        while self._history_size - len(history[0]) >= _WINDOW:
            self._history_size -= len(history.popleft())
        history[0] = history[0][self._history_size - _WINDOW :]
        self._history_size = _WINDOW

    def _rebuilt(self) -> zlib._Decompress:
        """A decompressor in the state of this one after the last marker, from the window it had there."""
        if not self._history:
            return zlib.decompressobj(-15)
        return zlib.decompressobj(-15, zdict=b"".join(self._history)[-_WINDOW:])


def _marker_candidates(fed_tail: bytes, source: bytes, last_only: bool) -> list[tuple[int, int]]:
    """Where the candidates for a marker begin and end in ``source``, in order (the first may have begun in
    ``fed_tail``, at a negative position); only the last one when ``last_only``."""
    if last_only:
        last = source.rfind(_SYNC_MARKER)
        if last >= 0:
            return [(last, last + 4)]
    found = []
    if fed_tail:
        straddling = (fed_tail + source[:3]).find(_SYNC_MARKER)
        if 0 <= straddling < len(fed_tail):
            found.append((straddling - len(fed_tail), straddling + 4 - len(fed_tail)))
    if not last_only:
        start = source.find(_SYNC_MARKER)
        while start >= 0:
            found.append((start, start + 4))
            start = source.find(_SYNC_MARKER, start + 4)
    return found


def _marker_begun(source: bytes) -> int:
    """How many bytes at the end of ``source`` are the beginning of a marker (0 to 3)."""
    for size in (3, 2, 1):
        if source.endswith(_SYNC_MARKER[:size]):
            return size
    return 0


def _at_block_boundary(decompressor: zlib._Decompress) -> bool:
    """Whether ``decompressor`` has just read a whole block and nothing of the next one (as after a marker)."""
    probe = decompressor.copy()
    try:
        return not probe.decompress(_BOUNDARY_PROBE) and probe.eof and not probe.unused_data
    except zlib.error:
        return False


def _decodable_prefix(decompressor: zlib._Decompress, source: bytes) -> bytes:
    """What ``source`` inflates to before its corrupt bits, which Go's reader hands over before the error: fed a
    byte at a time to find the corrupt one, then again with that byte's output taken a byte at a time (zlib drops
    the output of a call that fails, and the byte may complete symbols before the corrupt one; a call limited to
    one byte may still fail after writing it, when the corrupt code is a literal/length or distance code)."""
    first = decompressor.copy()
    corrupt = len(source)
    try:
        for i in range(len(source)):
            piece = source[i : i + 1]
            while piece and not first.eof:
                first.decompress(piece, _MAX_OUTPUT)
                piece = first.unconsumed_tail
    except zlib.error:
        corrupt = i
    out = []
    try:
        piece = source[:corrupt]
        while piece and not decompressor.eof:
            out.append(decompressor.decompress(piece, _MAX_OUTPUT))
            piece = decompressor.unconsumed_tail
        piece = source[corrupt : corrupt + 1]
        while not decompressor.eof:
            last = decompressor.copy()
            try:
                inflated = decompressor.decompress(piece, 1)
            except zlib.error:  # it may have written a byte first: without the input it stops after that one
                with contextlib.suppress(zlib.error):
                    out.append(last.decompress(b"", 1))
                break
            piece = decompressor.unconsumed_tail
            if not inflated:
                break
            out.append(inflated)
    except zlib.error:
        pass
    return b"".join(out)
