"""The write-ahead location at its edges (issue 30, scenarios 1-3): attempts that outlive their batch, two attempts
racing for a chunk on a filesystem whose moves replace their target, and a batch whose slices are gone. Tasks run
here as one Spark task runs them (`SliceTask(...).run()`) against a real nsqd; the driver's side is the reader's
methods, called in the order Spark calls them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from nsqd_py.spark import slices
from nsqd_py.spark.chunks import AgreedChunks
from nsqd_py.spark.driver_reader import DriverStreamReader
from nsqd_py.spark.options import OptionError, ReadOptions
from nsqd_py.spark.reader import NSQStreamReader, SlicePartition
from nsqd_py.spark.schema import ARROW_SCHEMA
from nsqd_py.spark.slice_task import BatchClosedError, SliceAssignment, SliceTask
from nsqd_py.spark.slices import DataLossError, SliceSpec, SliceStore
from tests.spark.stores import LocalStore, use_store
from tests.spark.util import bodies, planned, publish, source_options
from tests.support import NsqdProcess, channel_stats, drain, wait_until

pytestmark = pytest.mark.slow



def options(nsqd: NsqdProcess, topic: str, **extra: str) -> ReadOptions:
    return ReadOptions.parse(source_options(nsqd, topic, **extra))



def read_rows(task: SliceTask) -> list[tuple[str, bytes]]:
    table = pa.Table.from_batches(list(task.run()), ARROW_SCHEMA)
    return list(zip(table.column("id").to_pylist(), table.column("body").to_pylist(), strict=True))


def settled(nsqd: NsqdProcess, topic: str) -> dict:
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0)
    return channel_stats(nsqd, topic, "c")


def started(nsqd: NsqdProcess, topic: str, **extra: str) -> tuple[NSQStreamReader, dict]:
    """A reader and its initial offset, after the first trigger created the channel (nothing to read yet)."""
    reader = NSQStreamReader(options(nsqd, topic, **extra))
    start = reader.initialOffset()
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start
    return reader, start


def one_batch(reader: NSQStreamReader, start: dict) -> tuple[dict, list[SlicePartition]]:
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["batch"] == start["batch"] + 1
    return end, reader.partitions(start, end)


# -- 1: an attempt that outlives its batch ------------------------------------------------------------------------

def test_an_attempt_publishing_after_its_batch_was_retired_hands_its_messages_back(
        small_rdy: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """The late attempt has its messages when the batch commits and retires: before, its publish recreated the
    directory, won, and FINed 50 messages that no committed batch holds."""
    topic = name("late")
    reader, start = started(small_rdy, topic, writeAheadLocation=str(tmp_path), minBatchesToRetain="1",
                            maxOffsetsPerTrigger="50", minPartitions="1")
    publish(small_rdy, topic, bodies(150))
    first, [part] = one_batch(reader, start)
    late = SliceTask(part.plan, reader.opts, None)
    publish_chunk = late.slice.publish

    def batch_commits_meanwhile(number: int, table: pa.Table) -> bool:
        """The winner reads the slice, Spark commits it and the next batch, and retention removes the first."""
        winner = SliceTask(part.plan, reader.opts, None)
        assert len(read_rows(winner)) == 50
        reader.commit(first)
        second, parts = one_batch(reader, first)
        for other in parts:
            read_rows(SliceTask(other.plan, reader.opts, None))
        reader.commit(second)
        assert SliceStore(str(tmp_path), first["query"]).batches() == [2]
        return publish_chunk(number, table)

    late.slice.publish = batch_commits_meanwhile  # type: ignore[method-assign]
    with pytest.raises(BatchClosedError, match="handed back 50 messages"):
        read_rows(late)
    assert settled(small_rdy, topic)["depth"] == 50  # 150 - two batches of 50: the late attempt's 50 are back


def test_a_committed_batch_stays_for_late_attempts_then_goes(small_rdy: NsqdProcess, name: Callable[[str], str],
                                                             tmp_path: Path) -> None:
    topic = name("retain")
    reader, start = started(small_rdy, topic, writeAheadLocation=str(tmp_path), minBatchesToRetain="2",
                            maxOffsetsPerTrigger="20")
    publish(small_rdy, topic, bodies(100))
    offsets = [start]
    for _ in range(3):
        end, parts = one_batch(reader, offsets[-1])
        first_rows = [read_rows(SliceTask(p.plan, reader.opts, None)) for p in parts]
        reader.commit(end)
        offsets.append(end)
        # a late attempt of the batch just committed replays its rows and takes nothing from nsqd
        assert [read_rows(SliceTask(p.plan, reader.opts, None)) for p in parts] == first_rows
    store = SliceStore(str(tmp_path), start["query"])
    assert store.batches() == [2, 3]
    assert not store.is_open(3)
    assert settled(small_rdy, topic)["depth"] == 40
    with pytest.raises(DataLossError, match="batch 1"):  # retired: it cannot be replayed any more
        reader.partitions(offsets[0], offsets[1])


# -- 2: two attempts on a filesystem whose moves replace their target ---------------------------------------------

class _RacingMoves(LocalStore):
    """A SubTreeFileSystem over a local directory (its `move` replaces the target, as HDFS's and S3's do through
    pyarrow) whose moves of chunk files wait until two attempts are both about to move: the race of two attempts
    that both found a chunk number free."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.barrier = threading.Barrier(2, timeout=5)
        self.raced = 0

    def move(self, src: str, dest: str) -> None:
        if src.endswith(".tmp") and self.raced < 2:
            self.raced += 1
            with contextlib.suppress(threading.BrokenBarrierError):  # the other attempt won before moving
                self.barrier.wait()
        self.inner.move(src, dest)


@pytest.fixture
def racing_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _RacingMoves:
    """Locations `racing://...` resolve to one _RacingMoves filesystem."""
    handler = _RacingMoves(tmp_path)
    use_store(monkeypatch, "racing", handler)
    return handler


def test_moves_on_the_test_filesystem_replace_their_target(tmp_path: Path) -> None:
    """The premise of the race below: this filesystem gives no exclusive move."""
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    for name, data in (("a", b"first"), ("b", b"second")):
        with fs.open_output_stream(name) as out:
            out.write(data)
    fs.move("a", "b")
    with fs.open_input_stream("b") as source:
        assert source.read() == b"first"


def test_two_attempts_racing_for_each_chunk_agree_and_lose_nothing(
        small_rdy: NsqdProcess, name: Callable[[str], str], racing_store: _RacingMoves) -> None:
    topic = name("race")
    sent = bodies(150)
    publish(small_rdy, topic, sent)
    task_plan = planned(SliceAssignment("racing://wa", "q1", 1, "c", SliceSpec(topic, small_rdy.tcp_address, 0, 100)))
    opts = options(small_rdy, topic, pollTimeout="3s")  # a busy machine must not end the slice early
    results: dict[str, list[tuple[str, bytes]]] = {}

    def attempt(label: str) -> None:
        results[label] = read_rows(SliceTask(task_plan, opts, None))

    threads = [threading.Thread(target=attempt, args=(label,)) for label in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert racing_store.raced == 2  # both attempts did reach the move of a chunk at the same time
    assert results["a"] == results["b"] and len(results["a"]) == 100
    assert read_rows(SliceTask(task_plan, opts, None)) == results["a"]  # a replay: the same rows
    assert settled(small_rdy, topic)["depth"] == 50
    left = [m.body for m in drain(small_rdy.tcp_port, topic, "c", rdy=50)]
    assert sorted([body for _, body in results["a"]] + left) == sorted(sent)  # nothing lost, nothing twice


def test_many_offers_for_one_chunk_have_one_winner(tmp_path: Path) -> None:
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    fs.create_dir("slice")
    chunks, start = AgreedChunks(fs), threading.Barrier(6, timeout=10)
    won: list[bool] = []

    def offer(i: int) -> None:
        table = pa.table({"who": [i]})
        start.wait()
        won.append(chunks.publish("slice", 0, table))

    threads = [threading.Thread(target=offer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(won) == [False] * 5 + [True]
    winner = chunks.read("slice", 0)
    assert winner is not None and winner.num_rows == 1
    assert chunks.read("slice", 0) == winner


def test_a_crashed_attempts_files_do_not_block_the_chunk(tmp_path: Path) -> None:
    """An attempt that died after offering and proposing (no verdict): the next attempt still decides."""
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    fs.create_dir("slice/000000")
    with fs.open_output_stream("slice/000000/dead.arrow"):
        pass
    with fs.open_output_stream("slice/000000/r1.p.dead.dead"):
        pass
    chunks = AgreedChunks(fs)
    assert chunks.publish("slice", 0, pa.table({"who": [1]}))
    assert chunks.read("slice", 0) == pa.table({"who": [1]})


def test_an_offer_into_a_retired_slice_loses(tmp_path: Path) -> None:
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    assert not AgreedChunks(fs).publish("gone", 0, pa.table({"x": [1]}))
    assert fs.get_file_info("gone").type == pafs.FileType.NotFound  # not recreated


# -- 3: a batch whose slices are gone -----------------------------------------------------------------------------

def test_a_replayed_batch_whose_slices_are_gone_fails_unless_told_otherwise(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    topic = name("wiped")
    reader, start = started(nsqd, topic, writeAheadLocation=str(tmp_path))
    publish(nsqd, topic, bodies(30))
    end, parts = one_batch(reader, start)
    assert sum(len(read_rows(SliceTask(p.plan, reader.opts, None))) for p in parts) == 30
    pafs.LocalFileSystem().delete_dir(str(tmp_path / start["query"]))  # the location is wiped; Spark restarts
    publish(nsqd, topic, bodies(5, "fresh"))

    restarted = NSQStreamReader(options(nsqd, topic, writeAheadLocation=str(tmp_path)))
    with pytest.raises(DataLossError, match=r"batch 1 .*failOnDataLoss"):
        restarted.partitions(start, end)
    lenient = NSQStreamReader(options(nsqd, topic, writeAheadLocation=str(tmp_path), failOnDataLoss="false"))
    again = [row for p in lenient.partitions(start, end) for row in read_rows(SliceTask(p.plan, lenient.opts, None))]
    assert sorted(body for _, body in again) == sorted(bodies(5, "fresh"))  # read afresh, as the warning says


def test_executors_check_the_batch_not_a_cached_query_marker(nsqd: NsqdProcess, name: Callable[[str], str],
                                                             tmp_path: Path) -> None:
    """The query's marker removed mid-run: tasks of a planned batch still run (before, every task failed with "not
    shared storage"); a batch removed from the location fails with what happened."""
    topic = name("marker")
    reader, start = started(nsqd, topic, writeAheadLocation=str(tmp_path))
    publish(nsqd, topic, bodies(10))
    end, parts = one_batch(reader, start)
    (tmp_path / start["query"] / slices.QUERY_MARKER).unlink()
    assert sum(len(read_rows(SliceTask(p.plan, reader.opts, None))) for p in parts) == 10
    reader.commit(end)
    publish(nsqd, topic, bodies(10, "next"))
    second, parts = one_batch(reader, end)
    assert (tmp_path / start["query"] / slices.QUERY_MARKER).exists()  # planning records it again
    pafs.LocalFileSystem().delete_dir(str(tmp_path / start["query"] / f"{second['batch']:012d}"))
    with pytest.raises(DataLossError, match="not in the nsq source's write-ahead location"):
        read_rows(SliceTask(parts[0].plan, reader.opts, None))


# -- the channel, the read mode and ephemeral channels ------------------------------------------------------------

def test_a_replay_reads_the_channel_it_was_planned_on(nsqd: NsqdProcess, name: Callable[[str], str],
                                                      tmp_path: Path) -> None:
    topic = name("chan")
    reader, start = started(nsqd, topic, writeAheadLocation=str(tmp_path))
    publish(nsqd, topic, bodies(10))
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    renamed = NSQStreamReader(options(nsqd, topic, channel="other", writeAheadLocation=str(tmp_path)))
    got = [row for p in renamed.partitions(start, end)
           for row in pa.Table.from_batches(list(renamed.read(p)), ARROW_SCHEMA).to_pylist()]
    assert len(got) == 10 and {row["channel"] for row in got} == {"c"}
    assert settled(nsqd, topic)["depth"] == 0


def test_an_offset_of_the_other_read_mode_says_what_to_do(nsqd: NsqdProcess) -> None:
    executors = NSQStreamReader(options(nsqd, "t"))
    with pytest.raises(ValueError, match="readMode=driver"):
        executors.partitions({"seq": 1}, {"seq": 2})
    driver = DriverStreamReader(options(nsqd, "t", readMode="driver"))
    offset = executors.initialOffset()
    with pytest.raises(ValueError, match="readMode=executors"):
        driver.latestOffset(offset, driver.getDefaultReadLimit())
    with pytest.raises(ValueError, match="readMode=executors"):
        driver.partitions(offset, offset)


def test_an_ephemeral_channel_is_refused() -> None:
    with pytest.raises(OptionError, match="ephemeral"):
        ReadOptions.parse({"subscribe": "t", "channel": "c#ephemeral", "nsqdTcpAddresses": "h:4150"})


def test_the_progress_counts_fresh_and_replayed_chunks(small_rdy: NsqdProcess, name: Callable[[str], str],
                                                       tmp_path: Path) -> None:
    """A task killed after its first chunk: the retry replays that chunk and reads the second from nsqd; the end of
    the slice records that, and the progress shows it once the batch commits."""
    topic = name("progress")
    reader, start = started(small_rdy, topic, writeAheadLocation=str(tmp_path), minPartitions="1")
    publish(small_rdy, topic, bodies(100))
    end, [part] = one_batch(reader, start)
    killed = SliceTask(part.plan, reader.opts, None).run()
    next(killed)  # its first chunk is published and FINed
    killed.close()
    assert len(read_rows(SliceTask(part.plan, reader.opts, None))) == 100
    reader.commit(end)
    reader.latestOffset(end, reader.getDefaultReadLimit())
    progress = reader.reportLatestOffset()
    assert progress is not None
    assert (progress["freshChunks"], progress["replayedChunks"], progress["deadLettered"]) == (1, 1, 0)
