"""The driver-mode streaming reader (`readMode=driver`): micro-batches of NSQ messages read by the driver, FINed only
after Spark committed them.

For clusters whose executors cannot reach nsqd, or that have no storage shared by driver and executors for the
executor mode's write-ahead location (reader.py). Spark keeps one reader for the whole query in a long-lived
Python process on the driver: `latestOffset`, `partitions` and `commit` run there, so that is where the NSQ
connections live (opened on the first `latestOffset`, never in `__init__`, because a planning copy is built and
pickled too). The messages travel to the executors inside the input partitions, already as Arrow.

The offset is a micro-batch sequence number, ``{"seq": n}``. It is not replayable: after a restart a batch that
was planned but not committed comes back empty, and nsqd redelivers its messages once their msg_timeout passes
(a dropped connection does not requeue them). Spark calls `commit(end)` only when it plans the next batch, so while
messages wait for their commit and nothing new has arrived the reader plans an empty batch to get that commit; a
clean stop (control.py) relies on that too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from ..client.protocol import Message
from .consumer import SourceConsumer
from .control import DrainServer, socket_path
from .options import ReadOptions
from .schema import message_table

log = logging.getLogger(__name__)

#: how long latestOffset waits for a first message when it would otherwise return "no new data"
_POLL_WAIT = 0.1


class NSQPartition(InputPartition):
    """One part of a micro-batch's messages, as rows (pickled from the driver to an executor)."""

    def __init__(self, messages: list[Message], topic: str, channel: str) -> None:
        super().__init__(len(messages))
        addresses = [m.conn.address if m.conn is not None else None for m in messages]
        self.table = message_table(messages, topic, channel, addresses)


@dataclass
class _Live:
    """What exists only in the driver-side reader process: the subscription and the batches awaiting commit."""

    consumer: SourceConsumer
    drain_server: DrainServer
    batches: dict[int, list[Message]] = field(default_factory=dict)
    #: set by a clean stop (see control.py): take nothing new, get the last batch committed
    draining: bool = False


def _check_mode(offset: dict) -> None:
    if "seq" not in offset:
        raise ValueError("this checkpoint holds offsets of readMode=executors (the default): drop readMode=driver, "
                         "or start the query with a new checkpoint location")


class DriverStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("nsq").option("readMode", "driver")`: one topic/channel, at-least-once."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        #: with trigger(availableNow=True): only messages published up to here (ns since the epoch) are read
        self.cutoff_ns: int | None = None
        self._live: _Live | None = None

    def __getstate__(self) -> dict:
        """Pickles without the subscription: copies go to planners and executors."""
        return {**self.__dict__, "_live": None}

    def _state(self) -> _Live:
        if self._live is None:
            consumer = SourceConsumer(self.opts, max_in_flight=self.opts.max_in_flight)
            consumer.start()
            server = DrainServer(socket_path(self.opts.topic, self.opts.channel), self._drain,
                                 lambda: consumer.unsettled_count() == 0)
            self._live = _Live(consumer, server)
            server.start()
        return self._live

    def _drain(self) -> None:
        """(On the drain server's thread.) Hand back the buffer; `latestOffset` does the rest."""
        if self._live is not None:
            self._live.draining = True
            self._live.consumer.requeue_buffered()

    # -- offsets -------------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self.cutoff_ns = time.time_ns()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        _check_mode(start)
        live = self._state()
        seq = int(start["seq"])
        if seq + 1 in live.batches:  # asked again for the same start: the same answer
            return {"seq": seq + 1}
        awaiting_commit = any(live.batches[s] for s in live.batches if s <= seq)
        if live.draining:  # messages delivered before RDY 0 arrived go back too
            live.consumer.requeue_buffered()
            if not awaiting_commit:
                return start
            live.batches[seq + 1] = []
            return {"seq": seq + 1}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.opts.max_messages_per_batch
        cutoff = self.cutoff_ns
        # availableNow ends at the first "no new data": give messages time to arrive before saying so
        wait = 0.0 if awaiting_commit else _POLL_WAIT if cutoff is None else self.opts.idle_timeout
        messages = live.consumer.take(max_rows, wait, None if cutoff is None else lambda m: m.timestamp <= cutoff)
        if messages or awaiting_commit:
            live.batches[seq + 1] = messages
            return {"seq": seq + 1}
        if cutoff is not None:  # availableNow ends here: whatever arrived later goes back to the channel
            live.consumer.requeue_buffered()
        return start

    def partitions(self, start: dict, end: dict) -> list[NSQPartition]:
        _check_mode(end)
        if self._live is None:  # a batch planned by an earlier run: its messages come back from nsqd
            return []
        messages = [m for s in range(int(start["seq"]) + 1, int(end["seq"]) + 1)
                    for m in self._live.batches.get(s, ())]
        if not messages:
            return []
        count = min(self.opts.num_partitions, len(messages))
        size = -(-len(messages) // count)
        return [NSQPartition(messages[i:i + size], self.opts.topic, self.opts.channel)
                for i in range(0, len(messages), size)]

    def commit(self, end: dict) -> None:
        if self._live is None:
            return
        done = [s for s in self._live.batches if s <= int(end["seq"])]
        messages = [m for s in sorted(done) for m in self._live.batches.pop(s)]
        self._live.consumer.finish(messages)
        log.debug("committed up to batch %s: FIN %d messages", end["seq"], len(messages))

    def stop(self) -> None:
        """Hand back everything not committed (faster than waiting for msg_timeout) and disconnect."""
        if self._live is None:
            return
        live, self._live = self._live, None
        live.drain_server.close()
        live.consumer.requeue_buffered()
        live.consumer.requeue([m for batch in live.batches.values() for m in batch])
        live.consumer.close()

    # -- executors -----------------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, NSQPartition)
        yield from partition.table.to_batches()
