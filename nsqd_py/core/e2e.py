"""End-to-end processing latency: nsqd's sliding-window quantiles (internal/quantile), one per channel.

nsqd samples `now - publish timestamp` at every FIN into two streams that each cover half of
`--e2e-processing-latency-window-time`. Samples go into the current half; once half a window has passed the
other half is cleared and becomes the current one. A query reads both halves, so it covers between half a
window and a whole one. A topic reports all of its channels' halves merged.

nsqd's streams are approximate (perks' targeted quantiles). Here each half keeps exact samples, up to
`SAMPLE_CAP`; after that it keeps a uniform reservoir sample and counts every sample it has seen, so each
kept sample stands for `seen / kept` of them. Quantile q is then the smallest sample whose cumulative weight
reaches q of the total (nearest rank; q = 1 is the maximum): exact below the cap, an unbiased estimate above
it, and bounded memory either way. The count is the number of FINs in the window, as in nsqd.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config.options import Options

#: samples kept per half window (two halves per channel)
SAMPLE_CAP = 2048

Quantiles = list[tuple[float, float]]


class _Half:
    """One half window: its samples (or a reservoir of them) and how many it has seen."""

    __slots__ = ("samples", "seen")

    def __init__(self) -> None:
        self.samples: list[int] = []
        self.seen = 0

    def add(self, value: int) -> None:
        self.seen += 1
        if len(self.samples) < SAMPLE_CAP:
            self.samples.append(value)
        else:
            slot = random.randrange(self.seen)
            if slot < SAMPLE_CAP:
                self.samples[slot] = value

    def clear(self) -> None:
        self.samples = []
        self.seen = 0


class E2ELatency:
    """The latency window of one channel."""

    __slots__ = ("_current", "_half_ns", "_halves", "_last_move")

    def __init__(self, window_ns: int) -> None:
        self._half_ns = max(window_ns // 2, 1)
        self._halves = (_Half(), _Half())
        self._current = 0
        self._last_move = time.monotonic_ns()

    @classmethod
    def for_options(cls, opts: Options) -> E2ELatency | None:
        """A window when --e2e-processing-latency-percentile is set; nsqd keeps none otherwise."""
        if not opts.e2e_processing_latency_percentiles:
            return None
        return cls(opts.e2e_processing_latency_window_time)

    def insert(self, published_ns: int) -> None:
        """Record a FIN of a message published at ``published_ns`` (unix ns)."""
        self._advance()
        self._halves[self._current].add(time.time_ns() - published_ns)

    def result(self, quantiles: Sequence[float]) -> tuple[int, Quantiles]:
        return merged_result([self], quantiles)

    def _advance(self) -> None:
        """nsqd's moveWindow, once per half window passed (more than two passed: both halves are stale)."""
        moves = (time.monotonic_ns() - self._last_move - 1) // self._half_ns
        if moves <= 0:
            return
        self._last_move += moves * self._half_ns
        if moves >= 2:
            self._halves[0].clear()
            self._halves[1].clear()
        self._current = (self._current + moves) % 2
        self._halves[self._current].clear()

    def _weighted(self) -> Iterable[tuple[int, float]]:
        self._advance()
        for half in self._halves:
            if half.samples:
                weight = half.seen / len(half.samples)
                for value in half.samples:
                    yield value, weight

    def _seen(self) -> int:
        return self._halves[0].seen + self._halves[1].seen


def merged_result(windows: Iterable[E2ELatency], quantiles: Sequence[float]) -> tuple[int, Quantiles]:
    """(count, [(quantile, value ns)...]) over the union of ``windows``; values are 0 without samples."""
    windows = list(windows)
    pairs = sorted(pair for window in windows for pair in window._weighted())
    count = sum(window._seen() for window in windows)
    return count, [(q, float(_weighted_quantile(pairs, q))) for q in quantiles]


def _weighted_quantile(pairs: Sequence[tuple[int, float]], q: float) -> int:
    if not pairs:
        return 0
    total = sum(weight for _, weight in pairs)
    target = q * total - 1e-9 * total  # float slack, so that q = 1 reaches the last sample
    cumulative = 0.0
    for value, weight in pairs:
        cumulative += weight
        if cumulative >= target:
            return value
    return pairs[-1][0]
