"""The streaming reader: the driver plans, the executors read (the default, `readMode=executors`).

Each trigger the driver reads the channels' depth from nsqd's `/stats` and turns it into slices: which nsqd, which
topic, how many rows (planner.py). The plan is the offset, `{"query", "batch", "slices", "cutoff", "location"}`, so
Spark's offset log keeps it, and a batch Spark runs again after a failure or a driver restart has the same slices.
Executor tasks read them (slice_task.py): from the write-ahead location when an attempt already published them,
otherwise from nsqd, publishing before they FIN. `commit` deletes the slices of committed batches.
"""

from __future__ import annotations

import calendar
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

from .clocks import clock_offsets
from .down_nodes import DownNodes
from .history import start_replays
from .options import OptionError, ReadOptions
from .planner import (
    ChannelState,
    Survey,
    UnreachableError,
    backlog_before,
    default_partitions,
    plan_slices,
    skip_backlog,
    survey,
)
from .slice_task import SliceAssignment, SliceTask
from .slices import LAYOUT, DataLossError, SliceSpec, SliceStore, check_location, resolve_location
from .starts import STARTS_DIR, StartRecord
from .storage import REDACTED, redact

log = logging.getLogger(__name__)

#: how often availableNow looks again while what it still has to read is in flight or deferred
_WAIT_INTERVAL = 1.0


class SlicePartition(InputPartition):
    """One slice of a micro-batch: a description of work, not data."""

    def __init__(self, plan: SliceAssignment, cutoff: dict[str, int] | int | None) -> None:
        super().__init__(plan.spec.index)
        self.plan = plan
        #: availableNow's cutoff on the clock of this slice's nsqd (one number for all in offsets of earlier versions)
        self.cutoff_ns = cutoff[plan.spec.nsqd] if isinstance(cutoff, dict) else cutoff


def _offset(query: str, batch: int, slices: list[SliceSpec], cutoff_ns: dict[str, int] | None, location: str,
            channel: str, planned_at: float) -> dict:
    """The location and the channel are in the offset too: a batch replayed after a restart finds its slices and
    reads the same channel even if the options or the driver's working directory changed meanwhile; and so is how
    its slices' directories are named (`LAYOUT`: an offset without it was planned with the names as they are). The
    location is `redact`ed: Spark writes offsets to the checkpoint and shows them in every progress, so its
    credentials come from the options (`NSQStreamReader.location_of`). ``planned_at`` (epoch seconds) is when the
    batch was planned, or for the initial offset when the reads of the channel first started: maxTriggerDelay counts
    from there, across restarts."""
    return {"query": query, "batch": batch, "slices": [s.encode() for s in slices], "cutoff": cutoff_ns,
            "location": redact(location), "channel": channel, "layout": LAYOUT, "plannedAt": round(planned_at, 3)}


def _epoch(stamp: object, default: float) -> float:
    """A start record's `startedAt` (UTC, to the second) in epoch seconds; ``default`` when it has none."""
    if not isinstance(stamp, str):
        return default
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return default


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
        check_location(self.location)  # a store chunks cannot be published on fails the query here, not per chunk
        #: with trigger(availableNow=True): only messages published up to here are read (ns since the epoch on each
        #: nsqd's own clock, by its TCP address)
        self.cutoff_ns: dict[str, int] | None = None
        #: batches planned since prepareForTriggerAvailableNow (with an endingTimestamp before the start, one of them
        #: reading nothing ends the query)
        self._available_now_batches: set[int] = set()
        #: their slices' quotas, and the last batch planned before an nsqd restart made the counts useless
        self._quotas: dict[int, dict[str, int]] = {}
        self._counts_lost_at: int | None = None
        #: availableNow's survey just before its cutoff, by (topic, nsqd)
        self._snapshot: dict[tuple[str, str], ChannelState] | None = None
        #: availableNow ends when the snapshot's messages are gone by /stats' count (False: endingTimestamp before it)
        self._by_count = True
        #: startingOffsets was applied, or found applied by an earlier start
        self._started = False
        #: the first start made channels that replay retained history (history.py): nsqd hands a replay to its
        #: channel a batch at a time, so /stats' counts do not show what availableNow has still to read
        self._replayed = False
        #: rows in the batches committed so far (counted before their slices go)
        self._committed_rows: dict[int, int] = {}
        #: what the tasks of the batches committed so far did (freshChunks, replayedChunks, handedBack, ...)
        self._activity: dict[str, int] = {}
        self._last_plan: tuple[dict, dict] | None = None
        #: the last batch committed (counted once), and the last one whose ends the planning examined
        self._last_committed = self._examined = 0
        self._ends_cache: tuple[int, dict[str, dict[str, int]]] | None = None
        #: nsqd that the executors could not connect to
        self._down = DownNodes()
        #: writeAheadLocation changed since the batch the query restarted from (warned once)
        self._moved = False
        #: when the reads of the channel first started (the start record's time), for the initial offset
        self._first_start = time.time()
        self._survey = Survey([], [])

    # -- planning (driver) --------------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        self._apply_starting_offsets()
        return _offset(uuid.uuid4().hex, 0, [], None, self.location, self.opts.channel, self._first_start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_offsets_per_trigger)

    def _apply_starting_offsets(self, latest: bool = True) -> None:
        """startingOffsets (or a start time), once per channel and topics in this write-ahead location (starts.py):
        Spark calls initialOffset on every trigger until it plans the first batch, again to run it, and again after
        a restart before the first batch committed. Only the first start empties the channel (latest) or makes the
        channels that replay retained history (earliest or a time: history.py). ``latest`` false (availableNow's
        preparation, which Spark calls on restarts too) leaves latest to initialOffset, which only a query without
        a checkpoint calls."""
        if self._started:
            return
        store = SliceStore(self.location, STARTS_DIR)
        record = StartRecord(store.fs, store.root, self.opts)
        first = record.read()
        starts_at = self.opts.describe_start()
        if first is None and starts_at == "latest":
            if not latest:
                return
            record.write(starts_at)
            skip_backlog(self.opts)
        elif first is None:
            replays = start_replays(self.opts)
            record.write(starts_at, replays)
            self._replayed = bool(replays)
        else:
            log.info("the reads of channel %s began at %s (startingOffsets=%s, recorded in %s): continuing where the "
                     "channel is, whatever startingOffsets says now", self.opts.channel, first.get("startedAt"),
                     first.get("startingOffsets"), record.path)
            self._replayed = bool(first.get("replays"))
            self._first_start = _epoch(first.get("startedAt"), self._first_start)
        self._started = True

    def prepareForTriggerAvailableNow(self) -> None:
        """The snapshot first, the cutoff right after it: every message counted in the snapshot is then older than the
        cutoff, so what availableNow waits for can be read (one published in between may be read, and counts as
        newer). Each nsqd gets the cutoff on its own clock, which stamps the messages: the latest time its clock
        may have read at the cutoff (clocks.py), so that no message from before it looks newer. An nsqd or lookupd
        that cannot be asked fails it: it could not know what it has to read."""
        self._apply_starting_offsets(latest=False)  # Spark prepares before initialOffset: make the replays first
        snapshot = survey(self.opts, strict=True).states
        now = time.time_ns()
        ending = self.opts.ending_timestamp_ns
        cutoff = now if ending is None else min(ending, now)
        # a replay's history is not in the counts: it ends when a batch reads nothing from before the cutoff
        self._by_count = cutoff == now and not self._replayed
        self._snapshot = {s.key: s for s in snapshot}
        offsets = clock_offsets({s.nsqd: s.http for s in snapshot}, self.opts.connect)
        self.cutoff_ns = {nsqd: cutoff + offset.high for nsqd, offset in offsets.items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        _check_mode(start)
        if self._last_plan is not None and self._last_plan[0] == start:  # asked again: the same answer
            return self._last_plan[1]
        store = SliceStore(self.location_of(start), start["query"])
        batch = int(start["batch"])
        self._executors_reached(store, start)
        states = [s for s in self._channels_to_read(store, batch) if self._down.may_plan(s.nsqd)]
        available = sum(s.readable for s in states)
        if available == 0 or self._waits_for_more(available, start):
            return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        partitions = self.opts.min_partitions or default_partitions()
        slices = plan_slices(states, max_rows, self.opts.max_bytes_per_trigger, partitions, batch + 1)
        end = _offset(start["query"], batch + 1, slices, self.cutoff_ns, self.location, self.opts.channel,
                      time.time())
        self._planning_store(store, start).plan(batch + 1, [s.name for s in slices])  # before Spark logs the offset
        if self.cutoff_ns is not None:
            self._available_now_batches.add(batch + 1)
            self._quotas[batch + 1] = {s.name: s.quota for s in slices}
        self._last_plan = (start, end)
        return end

    def location_of(self, offset: dict) -> str:
        """The write-ahead location of the batch of ``offset``, which holds it redacted (offsets of earlier versions:
        as typed, secrets and all): the options' location when it redacts the same (a rotated SAS token is the same
        place), the offset's when that has no secret to fill in (the location moved since)."""
        recorded = offset.get("location", self.location)
        if redact(recorded) == redact(self.location):
            return self.location
        if REDACTED in recorded:
            raise OptionError(f"batch {offset['batch']} of the nsq source was planned in writeAheadLocation "
                              f"{recorded!r}, whose credentials the checkpoint does not keep: give that location "
                              f"as writeAheadLocation again until the batch has committed")
        return recorded

    def _planning_store(self, previous: SliceStore, start: dict) -> SliceStore:
        """Where the next batch goes: the location of the options now. A batch planned before writeAheadLocation
        (or the working directory of a relative one) changed stays where its offset says, and is replayed and
        retired there; every new batch lives wholly in the new location."""
        if previous.location == self.location:
            return previous
        if not self._moved:
            log.warning("writeAheadLocation changed from %r to %r: batches from %d on go to the new location; "
                        "%s/%s can be removed once batch %d has committed", redact(previous.location),
                        redact(self.location), int(start["batch"]) + 1, redact(previous.location), start["query"],
                        int(start["batch"]))
            self._moved = True
        return SliceStore(self.location, start["query"])

    def _executors_reached(self, store: SliceStore, start: dict) -> None:
        """Learn from the batch that just ran which nsqd its tasks could not connect to (the driver's /stats survey
        may still reach them: a firewall, a TCP port down): they are planned again only after a growing pause, and
        the progress lists them. availableNow fails: it could not read what it promised."""
        batch = int(start["batch"])
        if batch <= self._examined or not start["slices"]:
            return
        self._examined = batch
        ends = self._ends(store, batch)
        for spec in (SliceSpec.decode(raw, start.get("layout", 1)) for raw in start["slices"]):
            counts = ends.get(spec.name)
            if counts is not None:
                self._down.report(spec.nsqd, bool(counts.get("unreachableSlices")))
        if self.cutoff_ns is not None and self._down.nodes:
            raise UnreachableError(f"trigger(availableNow=True) cannot read what it surveyed: executors could not "
                                   f"connect to nsqd {', '.join(sorted(self._down.nodes))} (see the executors' logs)")

    def _ends(self, store: SliceStore, batch: int) -> dict[str, dict[str, int]]:
        """The ends of ``batch``'s finished slices, read once for the planning and the commit that follows it."""
        if self._ends_cache is None or self._ends_cache[0] != batch:
            self._ends_cache = (batch, store.slice_ends(batch))
        return self._ends_cache[1]

    def _channels_to_read(self, store: SliceStore, batch: int) -> list[ChannelState]:
        """Every channel; with availableNow those that still hold messages from before its cutoff that nsqd can
        deliver, waiting while all of those are in flight or deferred (they come back), and none when it is done."""
        if self.cutoff_ns is None:
            if self.opts.ending_timestamp_ns is not None:
                raise OptionError("option 'endingTimestamp' applies to trigger(availableNow=True) only")
            self._survey = survey(self.opts, self.opts.fail_on_unreachable)
            return self._survey.states
        while True:
            self._survey = survey(self.opts, strict=True)
            self._check_counts(batch)
            if self._available_now_finished(store, batch):
                self._warn_left_paused()
                return []
            states = [s for s in self._survey.states if self._deliverable_before_cutoff(s) > 0]
            if any(s.readable for s in states) or not self._by_count:
                return states
            log.info("availableNow waits for %d messages from before its start, in flight or deferred",
                     sum(self._deliverable_before_cutoff(s) for s in states))
            time.sleep(_WAIT_INTERVAL)

    def _check_counts(self, batch: int) -> None:
        """An nsqd restarted since availableNow's snapshot (or a channel deleted and made again) counts the messages
        that enter its channels from 0 again, so its pending ones from before the start can no longer be told from
        the newer ones by count (it would wait for the newer ones forever). The run then ends at the first batch
        planned after ``batch`` that reads nothing while each of its tasks handed back at least its quota of newer
        messages: it saw all it was planned for, so no older message waits behind the newer ones (a task whose RDY
        filled with newer messages hands back fewer, and the next batch reads on). What is pre-start and in flight
        elsewhere or deferred at that moment is left for a later run, as a paused channel's messages are."""
        if not self._by_count:
            return
        snapshot = self._snapshot or {}
        restarted = sorted({s.nsqd for s in self._survey.states if s.key in snapshot
                            and (s.started != snapshot[s.key].started or s.entered < snapshot[s.key].entered)})
        if restarted:
            log.warning("availableNow: nsqd %s restarted since the run began, so its counts no longer tell the "
                        "messages from before the start from the newer ones: the run ends at its first batch that "
                        "reads none from before the start", ", ".join(restarted))
            self._by_count = False
            self._counts_lost_at = batch

    def _before_cutoff(self, state: ChannelState) -> int:
        """Messages from before availableNow's snapshot still pending in the channel (none in a channel the snapshot
        did not see); with an endingTimestamp before the start, all pending messages."""
        snapshot = (self._snapshot or {}).get(state.key)
        if snapshot is None:
            return 0
        return backlog_before(snapshot, state) if self._by_count else state.pending

    def _deliverable_before_cutoff(self, state: ChannelState) -> int:
        """Of those, at most how many nsqd can deliver while its pauses last: what a paused topic's queue or a paused
        channel holds is left for a later run, not waited for."""
        return min(self._before_cutoff(state), state.deliverable)

    def _warn_left_paused(self) -> None:
        left = {s.key: self._before_cutoff(s) for s in self._survey.states if s.paused or s.topic_paused}
        if any(left.values()):
            log.warning("availableNow ends with up to %d messages from before its start in paused topics or channels "
                        "(%s): a later run reads them once they are resumed", sum(left.values()),
                        ", ".join(f"{topic} on {nsqd}" for (topic, nsqd), count in sorted(left.items()) if count))

    def _available_now_finished(self, store: SliceStore, batch: int) -> bool:
        """availableNow is done when no channel holds messages from before its cutoff, as /stats counts them, that
        nsqd can deliver while its pauses last. With an endingTimestamp before the start the count cannot tell the
        messages to read from those to skip: then a batch of this run that read nothing ends it."""
        if self._by_count:
            return not any(self._deliverable_before_cutoff(s) for s in self._survey.states)
        if batch not in self._available_now_batches:
            return False
        lost_at = self._counts_lost_at
        if lost_at is not None and batch <= lost_at:
            return False
        rows = self._committed_rows.get(batch)
        if (store.batch_rows(batch) if rows is None else rows) != 0:
            return False
        if lost_at is None:
            return True
        quotas = self._quotas.get(batch, {})
        ends = self._ends(store, batch)
        return all(ends.get(name, {}).get("handedBack", 0) >= quota for name, quota in quotas.items())

    def _waits_for_more(self, available: int, start: dict) -> bool:
        """minOffsetsPerTrigger: fewer rows wait, until maxTriggerDelay after the last batch was planned, as its
        offset (``start``) records it, so a restart does not start the clock again: the first trigger after a
        restart fires at once when the delay has passed meanwhile. An offset of an earlier version has no time:
        the clock then starts at 0, as Kafka's does."""
        minimum = self.opts.min_offsets_per_trigger
        if minimum is None or available >= minimum or self.cutoff_ns is not None:
            return False
        return time.time() - float(start.get("plannedAt", 0)) < self.opts.max_trigger_delay

    def reportLatestOffset(self) -> dict | None:
        """What the query progress shows as the source's latestOffset: the lag, per topic and nsqd, the nodes that
        did not answer the last survey, and with availableNow what it still has to read."""
        states = self._survey.states
        if not states and not self._survey.unreachable and not self._down.nodes:
            return None
        topics: dict[str, dict[str, dict[str, int]]] = {}
        for state in states:
            topics.setdefault(state.topic, {})[state.nsqd] = state.progress()
        report: dict = {"depth": sum(s.depth for s in states), "inFlight": sum(s.in_flight for s in states),
                        "topics": topics, "unreachable": self._survey.unreachable, **self._activity}
        if self._down.nodes:
            report["unreachableFromExecutors"] = self._down.progress()
        if self._snapshot is not None:
            report["beforeCutoff"] = sum(self._before_cutoff(s) for s in states)
        return report

    def partitions(self, start: dict, end: dict) -> list[SlicePartition]:
        _check_mode(end)
        batch = int(end["batch"])
        if batch == int(start.get("batch", -1)):
            return []
        cutoff, location = end.get("cutoff"), self.location_of(end)
        channel = end.get("channel", self.opts.channel)
        specs = [SliceSpec.decode(raw, end.get("layout", 1)) for raw in end["slices"]]
        store = SliceStore(location, end["query"])
        if not store.is_planned(batch):
            self._lost(store, batch, [spec.name for spec in specs])
        return [SlicePartition(SliceAssignment(location, end["query"], batch, channel, spec), cutoff) for spec in specs]

    def _lost(self, store: SliceStore, batch: int, slices: list[str]) -> None:
        """A batch Spark runs again whose record is gone from the write-ahead location (it is written when the batch
        is planned): its rows cannot be read again. failOnDataLoss fails the query; otherwise the batch reads afresh."""
        where = (f"batch {batch} of the nsq source is missing from its write-ahead location "
                 f"{redact(store.location)!r}")
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{where}: the rows it read cannot be replayed. Restore the location, or set "
                                f"failOnDataLoss=false to read this batch afresh from nsqd (its rows will differ)")
        log.warning("%s: reading it afresh from nsqd (failOnDataLoss=false); its rows differ from the first run", where)
        store.plan(batch, slices)

    def commit(self, end: dict) -> None:
        if "query" not in end:
            return
        store = SliceStore(self.location_of(end), end["query"])
        batch = int(end["batch"])
        if not end["slices"]:  # the initial offset, and batches Spark did not run, were never planned
            return
        if batch <= self._last_committed:  # a stateful query's no-data batch commits the same offset again
            return
        self._last_committed = batch
        ends = self._ends(store, batch)
        if batch in self._available_now_batches:
            self._committed_rows[batch] = sum(counts["rows"] for counts in ends.values())
        for counts in ends.values():
            for key, value in counts.items():
                if key != "rows":
                    self._activity[key] = self._activity.get(key, 0) + value
        store.commit(batch, self.opts.min_batches_to_retain)

    # -- reading (executors) ------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        yield from SliceTask(partition.plan, self.opts, partition.cutoff_ns).run()
