"""Per-batch progress lines (rows, rows/s, duration) for running streaming queries, from their query progress."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress


def format_progress(progress: StreamingQueryProgress) -> str:
    duration = progress.durationMs.get("triggerExecution", 0)
    return (f"[{progress.name or progress.id}] batch {progress.batchId}: {progress.numInputRows} rows, "
            f"{progress.processedRowsPerSecond:.1f} rows/s, {duration} ms")


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
