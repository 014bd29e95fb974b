"""Per-batch progress lines (rows, rows/s, duration) for running streaming queries, from their query progress."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Sequence

from pyspark.sql.streaming.listener import StreamingQueryProgress
from pyspark.sql.streaming.query import StreamingQuery


def lag(progress: StreamingQueryProgress) -> int | None:
    """Messages waiting in the channels of the query's format("nsq") sources, from their latestOffset (None when
    no source reports it)."""
    depths = []
    for source in progress.sources:
        with contextlib.suppress(TypeError, ValueError, KeyError):
            depths.append(int(json.loads(source.latestOffset)["depth"]))
    return sum(depths) if depths else None


def format_progress(progress: StreamingQueryProgress) -> str:
    duration = progress.durationMs.get("triggerExecution", 0)
    behind = lag(progress)
    waiting = "" if behind is None else f", {behind} waiting in nsqd"
    return (f"[{progress.name or progress.id}] batch {progress.batchId}: {progress.numInputRows} rows, "
            f"{progress.processedRowsPerSecond:.1f} rows/s, {duration} ms{waiting}")


def follow(queries: Sequence[StreamingQuery], out: Callable[[str], None] = print,
           stop: threading.Event | None = None, interval: float = 1.0,
           stopper: Callable[[StreamingQuery], None] = StreamingQuery.stop) -> None:
    """Print every executed batch until all ``queries`` have terminated, stopping them (in order, with
    ``stopper``) once ``stop`` is set; re-raises the first query's failure."""
    printed: dict[str, int] = {}
    pause = stop or threading.Event()

    def emit() -> None:
        for query in queries:
            for progress in query.recentProgress:
                # idle triggers report progress too, without an addBatch phase
                if "addBatch" in progress.durationMs and progress.batchId > printed.get(query.id, -1):
                    out(format_progress(progress))
                    printed[query.id] = progress.batchId

    while any(query.isActive for query in queries):
        if stop is not None and stop.is_set():
            for query in queries:
                stopper(query)
        emit()
        pause.wait(interval)
    emit()
    for query in queries:
        error = query.exception()
        if error is not None:
            raise error
