"""The streaming reader: the driver plans, the executors read (the default, `readMode=executors`).

Each trigger the driver reads the channels' depth from nsqd's `/stats` and turns it into slices: which nsqd, which
topic, how many rows (planner.py). The plan is the offset, `{"query", "batch", "slices", "cutoff", "location"}`, so
Spark's offset log keeps it, and a batch Spark runs again after a failure or a driver restart has the same slices.
Executor tasks read them (slice_task.py): from the write-ahead location when an attempt already published them,
otherwise from nsqd, publishing before they FIN. `commit` deletes the slices of committed batches.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .options import ReadOptions
from .planner import ChannelState, SliceSpec, plan_slices, survey
from .slice_task import SlicePlan, SliceTask
from .slices import DataLossError, SliceStore, resolve_location, slice_name

log = logging.getLogger(__name__)


class SlicePartition(InputPartition):
    """One slice of a micro-batch: a description of work, not data."""

    def __init__(self, plan: SlicePlan, cutoff_ns: int | None) -> None:
        super().__init__(plan.index)
        self.plan = plan
        self.cutoff_ns = cutoff_ns


def _offset(query: str, batch: int, slices: list[SliceSpec], cutoff_ns: int | None, location: str,
            channel: str) -> dict:
    """The location and the channel are in the offset too: a batch replayed after a restart finds its slices and
    reads the same channel even if the options or the driver's working directory changed meanwhile."""
    return {"query": query, "batch": batch, "slices": [s.encode() for s in slices], "cutoff": cutoff_ns,
            "location": location, "channel": channel}


def _check_mode(offset: dict) -> None:
    if "query" not in offset:
        raise ValueError("this checkpoint holds offsets of readMode=driver: keep that option, or start the query "
                         "with a new checkpoint location")


class NSQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("nsq")`: one channel of the subscribed topics, replayable by batch id."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        #: resolved where Spark builds the reader, on the driver: the executors get it inside each partition
        self.location = resolve_location(opts.write_ahead_location)
        #: with trigger(availableNow=True): only messages published up to here (ns since the epoch) are read
        self.cutoff_ns: int | None = None
        #: batches planned since prepareForTriggerAvailableNow: one of them reading nothing ends the query
        self._available_now_batches: set[int] = set()
        #: rows in the batches committed so far (counted before their slices go)
        self._committed_rows: dict[int, int] = {}
        self._last_plan: tuple[dict, dict] | None = None
        self._last_batch_at = time.monotonic()
        self._states: list[ChannelState] = []

    # -- planning (driver) --------------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        start = _offset(uuid.uuid4().hex, 0, [], None, self.location, self.opts.channel)
        SliceStore(self.location, start["query"]).mark()
        return start

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self.cutoff_ns = time.time_ns()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        _check_mode(start)
        if self._last_plan is not None and self._last_plan[0] == start:  # asked again: the same answer
            return self._last_plan[1]
        store = self._store(start.get("location", self.location), start["query"])
        batch = int(start["batch"])
        # availableNow cannot tell what it has to read while an nsqd cannot be asked: it fails rather than end early
        strict = self.opts.fail_on_unreachable or self.cutoff_ns is not None
        self._states = survey(self.opts.connect, self.opts.topics, self.opts.channel, strict)
        if self._available_now_finished(store, batch):
            return start
        available = sum(s.depth for s in self._states)
        if available == 0 or self._waits_for_more(available):
            return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        slices = plan_slices(self._states, max_rows, self.opts.max_bytes_per_trigger, self.opts.min_partitions)
        end = _offset(start["query"], batch + 1, slices, self.cutoff_ns, self.location, self.opts.channel)
        store.plan(batch + 1, [slice_name(s.topic, s.nsqd, s.index) for s in slices])  # before Spark logs the offset
        if self.cutoff_ns is not None:
            self._available_now_batches.add(batch + 1)
        self._last_plan = (start, end)
        self._last_batch_at = time.monotonic()
        return end

    def _store(self, location: str, query: str) -> SliceStore:
        return SliceStore(location, query)

    def _available_now_finished(self, store: SliceStore, batch: int) -> bool:
        """With availableNow, a batch of this run that read nothing means every admissible message was read."""
        if batch not in self._available_now_batches:
            return False
        rows = self._committed_rows.get(batch)
        return (store.batch_rows(batch) if rows is None else rows) == 0

    def _waits_for_more(self, available: int) -> bool:
        """minOffsetsPerTrigger: fewer rows wait, until maxTriggerDelay after the last batch."""
        minimum = self.opts.min_offsets_per_trigger
        if minimum is None or available >= minimum or self.cutoff_ns is not None:
            return False
        return time.monotonic() - self._last_batch_at < self.opts.max_trigger_delay

    def reportLatestOffset(self) -> dict | None:
        """What the query progress shows as the source's latestOffset: the lag, per topic and nsqd."""
        if not self._states:
            return None
        topics: dict[str, dict[str, dict[str, int]]] = {}
        for state in self._states:
            topics.setdefault(state.topic, {})[state.nsqd] = state.progress()
        return {"depth": sum(s.depth for s in self._states), "inFlight": sum(s.in_flight for s in self._states),
                "topics": topics}

    def partitions(self, start: dict, end: dict) -> list[SlicePartition]:
        _check_mode(end)
        batch = int(end["batch"])
        if batch == int(start.get("batch", -1)):
            return []
        cutoff, location = end.get("cutoff"), end.get("location", self.location)
        channel = end.get("channel", self.opts.channel)
        specs = [SliceSpec.decode(raw) for raw in end["slices"]]
        store = self._store(location, end["query"])
        if not store.is_planned(batch):
            self._lost(store, batch, [slice_name(s.topic, s.nsqd, s.index) for s in specs])
        return [SlicePartition(SlicePlan(location, end["query"], batch, spec.topic, spec.nsqd, spec.index,
                                         spec.quota, spec.byte_quota, channel), cutoff) for spec in specs]

    def _lost(self, store: SliceStore, batch: int, slices: list[str]) -> None:
        """A batch Spark runs again whose record is gone from the write-ahead location (it is written when the batch
        is planned): its rows cannot be read again. failOnDataLoss fails the query; otherwise the batch reads afresh."""
        where = f"batch {batch} of the nsq source is missing from its write-ahead location {store.location!r}"
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{where}: the rows it read cannot be replayed. Restore the location, or set "
                                f"failOnDataLoss=false to read this batch afresh from nsqd (its rows will differ)")
        log.warning("%s: reading it afresh from nsqd (failOnDataLoss=false); its rows differ from the first run", where)
        store.plan(batch, slices)

    def commit(self, end: dict) -> None:
        if "query" not in end:
            return
        store = self._store(end.get("location", self.location), end["query"])
        batch = int(end["batch"])
        if batch in self._available_now_batches:
            self._committed_rows[batch] = store.batch_rows(batch) or 0
        store.commit(batch, self.opts.min_batches_to_retain)

    # -- reading (executors) ------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        yield from SliceTask(partition.plan, self.opts, partition.cutoff_ns).run()
