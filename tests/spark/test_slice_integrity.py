"""The write-ahead location keeps each slice apart and knows what it holds (issue 38, cases 3, 7 and 8): topic names
that are not plain path components, a finished slice that lost chunks, and NFS answering EEXIST to a LINK that
succeeded. Tasks run as one Spark task runs them (`SliceTask(...).run()`) against a real nsqd; the driver's side is
the reader's methods, called in the order Spark calls them."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from nsqd_py.client.protocol import Message
from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.reader import NSQStreamReader
from nsqd_py.spark.schema import ARROW_SCHEMA
from nsqd_py.spark.slice_task import SliceAssignment, SliceTask
from nsqd_py.spark.slices import DataLossError, SliceSpec, SliceStore, path_component
from nsqd_py.spark.trials import Trials
from tests.spark.util import bodies, planned, publish, source_options
from tests.support import NsqdProcess, channel_stats, wait_until

pytestmark = pytest.mark.slow

#: valid NSQ topic names that are not plain path components: `..` is the parent directory, `.` this one, and the two
#: last are one name on a case-insensitive filesystem (macOS, SMB, Azure Files)
AWKWARD_TOPICS = (".", "..", "Clicks", "clicks")


def options(nsqd: NsqdProcess, topic: str, **extra: str) -> ReadOptions:
    return ReadOptions.parse(source_options(nsqd, topic, **extra))


def read_rows(task: SliceTask) -> list[dict]:
    return pa.Table.from_batches(list(task.run()), ARROW_SCHEMA).to_pylist()


def settled(nsqd: NsqdProcess, topic: str) -> dict:
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0)
    return channel_stats(nsqd, topic, "c")


def chunk_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.arrow"))


def case_insensitive_clashes(root: Path) -> list[Path]:
    """Directories holding two entries that a case-insensitive filesystem would take for one."""
    return [directory for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]
            if len({p.name.lower() for p in directory.iterdir()}) < len(list(directory.iterdir()))]


# -- case 3: topic names as path components ------------------------------------------------------------------------

def test_names_are_encoded_into_plain_distinct_path_components() -> None:
    encoded = [path_component(name) for name in (*AWKWARD_TOPICS, "_planned", "a#ephemeral", "[::1]:4150")]
    assert encoded == ["~2e", "~2e~2e", "~43licks", "clicks", "~5fplanned", "a~23ephemeral", "~5b~3a~3a1~5d~3a4150"]
    assert all(set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-~") for name in encoded)


def test_awkward_topic_names_get_a_slice_of_their_own_in_every_batch(
        nsqd: NsqdProcess, tmp_path: Path) -> None:
    """Topics `.`, `..`, `Clicks` and `clicks` read through several batches. Before, `..` put every batch's slice in
    one directory (`<query>/<batch>/../<nsqd>-0`): batch 2 replayed batch 1's chunk of `..` and never read its
    channel again; `.`'s slice was not found by the listing the progress uses, and `Clicks`/`clicks` shared a
    directory on a case-insensitive filesystem. After: one directory per (batch, topic, nsqd, index), each batch
    reads the channels afresh, and every message is read once."""
    sent = {topic: bodies(24, f"{topic}|") for topic in AWKWARD_TOPICS}
    reader = NSQStreamReader(options(nsqd, ",".join(AWKWARD_TOPICS), writeAheadLocation=str(tmp_path),
                                     maxOffsetsPerTrigger="32"))
    start = offset = reader.initialOffset()
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start  # the channels exist now
    for topic, messages in sent.items():
        publish(nsqd, topic, messages)
    store = SliceStore(str(tmp_path), start["query"])
    read: dict[str, list[bytes]] = {topic: [] for topic in AWKWARD_TOPICS}
    ids: list[str] = []
    for _ in range(10):
        end = reader.latestOffset(offset, reader.getDefaultReadLimit())
        if end == offset:
            break
        parts = reader.partitions(offset, end)
        for part in parts:
            task = SliceTask(part.plan, reader.opts, None)
            for row in read_rows(task):
                read[row["topic"]].append(row["body"])
                ids.append(row["id"])
            assert task.replayed_chunks == 0, f"batch {end['batch']} replayed a chunk of {part.plan.spec.topic!r}"
        batch_dir = tmp_path / start["query"] / f"{end['batch']:012d}"
        assert {(batch_dir / p.plan.spec.name).resolve().parent.parent for p in parts} == {batch_dir.resolve()}
        assert set(store.finished_slices(end["batch"])) == {p.plan.spec.name for p in parts}
        reader.commit(end)
        offset = end
    assert offset["batch"] >= 3 and end == offset  # several batches, then nothing left to plan
    assert read == {topic: messages for topic, messages in sent.items()}  # each once, in order, from its topic
    assert len(set(ids)) == len(ids)
    assert not case_insensitive_clashes(tmp_path)
    assert all(settled(nsqd, topic)["depth"] == 0 for topic in AWKWARD_TOPICS)


def test_trials_of_awkward_topic_names_stay_apart(tmp_path: Path) -> None:
    """Before, the trials of `..` were written into the query's directory itself, and those of `Clicks` and `clicks`
    shared one directory on a case-insensitive filesystem (a trial of one topic counted against the same message
    id in the other). After: each topic's trials are in `_trials/<encoded topic>/`."""
    store = SliceStore(str(tmp_path), "q1")
    suspect = Message(b"0" * 16, b"poison", 0, 9)
    for topic in AWKWARD_TOPICS:
        Trials(store, topic, "127.0.0.1:4150").start([suspect])
    trials_dir = tmp_path / "q1" / "_trials"
    assert sorted(p.name for p in trials_dir.iterdir()) == sorted(path_component(t) for t in AWKWARD_TOPICS)
    assert all(len(Trials(store, topic, "127.0.0.1:4150").failed()) == 1 for topic in AWKWARD_TOPICS)
    assert not case_insensitive_clashes(tmp_path)


def test_a_batch_planned_before_names_were_encoded_replays_from_its_raw_directories(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """A checkpoint written before the encoding: its offsets have no `layout`, and the slices of its last batch are
    under the raw names. Spark runs that batch again after the upgrade: the tasks replay those slices (before this
    change of layout they would have looked in the encoded directories, found nothing and read other rows)."""
    topic = name("Legacy")
    reader = NSQStreamReader(options(nsqd, topic, writeAheadLocation=str(tmp_path)))
    start = reader.initialOffset()
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start
    publish(nsqd, topic, bodies(20))
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    old_start, old_end = ({k: v for k, v in offset.items() if k != "layout"} for offset in (start, end))
    old_parts = reader.partitions(old_start, old_end)
    SliceStore(str(tmp_path), end["query"]).plan(end["batch"], [p.plan.spec.name for p in old_parts])  # as it did
    first = [row for p in old_parts for row in read_rows(SliceTask(p.plan, reader.opts, None))]
    assert len(first) == 20
    assert (tmp_path / end["query"] / f"{end['batch']:012d}" / topic).is_dir()  # the raw name, as before

    upgraded = NSQStreamReader(options(nsqd, topic, writeAheadLocation=str(tmp_path)))
    replays = [SliceTask(p.plan, upgraded.opts, None) for p in upgraded.partitions(old_start, old_end)]
    assert [row for task in replays for row in read_rows(task)] == first
    assert sum(task.fresh_chunks for task in replays) == 0


# -- case 7: a finished slice says what it holds ---------------------------------------------------------------------

def finished_slice(nsqd: NsqdProcess, topic: str, location: Path) -> tuple[SliceAssignment, list[dict], Path]:
    """A slice of 150 rows read in three chunks of 50 (nsqd's max RDY) and its end: its plan, rows and directory."""
    publish(nsqd, topic, bodies(150))
    plan = planned(SliceAssignment(str(location), "q1", 1, "c", SliceSpec(topic, nsqd.tcp_address, 0, 150)))
    task = SliceTask(plan, options(nsqd, topic), None)
    rows = read_rows(task)
    directory = Path(task.slice.directory)
    assert len(rows) == 150 and chunk_files(directory) == [f"00000{n}.arrow" for n in range(4)]
    return plan, rows, directory


def test_a_replay_missing_a_chunk_of_a_finished_slice_fails_unless_told_otherwise(
        small_rdy: NsqdProcess, name: Callable[[str], str], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Chunk 1 and the end are deleted (expired, or a partial restore). Before, the replay read chunk 0, then 50
    messages afresh from nsqd as chunk 1, then chunk 2: the 50 rows FINed into chunk 1 were lost without a word.
    After: it fails with DataLossError naming the slice and chunk 1, taking nothing from nsqd; with
    failOnDataLoss=false it warns with the same names and reads chunk 1 afresh, as before."""
    topic = name("lost")
    plan, rows, directory = finished_slice(small_rdy, topic, tmp_path)
    (directory / "000001.arrow").unlink()
    (directory / "000003.arrow").unlink()
    publish(small_rdy, topic, bodies(50, "fresh"))

    with pytest.raises(DataLossError, match=rf"slice {directory} .*chunk 1 is gone while chunk 2 is there"):
        read_rows(SliceTask(plan, options(small_rdy, topic), None))
    assert settled(small_rdy, topic)["depth"] == 50  # nothing taken

    with caplog.at_level(logging.WARNING, logger="nsqd_py.spark.slice_task"):
        again = read_rows(SliceTask(plan, options(small_rdy, topic, failOnDataLoss="false"), None))
    assert [r["body"] for r in again] == [r["body"] for r in rows[:50]] + bodies(50, "fresh") + \
        [r["body"] for r in rows[100:]]
    assert any(str(directory) in m and "chunk 1 is gone" in m and "reading chunk 1 afresh" in m
               for m in caplog.messages)
    assert settled(small_rdy, topic)["depth"] == 0


def test_an_end_that_records_more_chunks_than_the_slice_holds_is_data_loss(
        small_rdy: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    """The last data chunk gone and the end under its number (a copy that renumbered them): no gap is left, but
    the end records 3 chunks and 150 rows. Before, the replay ended quietly with 100 rows; after, DataLossError."""
    topic = name("short")
    plan, _, directory = finished_slice(small_rdy, topic, tmp_path)
    (directory / "000003.arrow").replace(directory / "000002.arrow")
    with pytest.raises(DataLossError, match="its end records 3 chunks and 150 rows, but 2 chunks and 100 rows"):
        read_rows(SliceTask(plan, options(small_rdy, topic), None))


# -- case 8: NFS answers EEXIST to a LINK that succeeded -------------------------------------------------------------

def test_a_link_that_succeeded_but_answered_eexist_wins_its_chunk(
        small_rdy: NsqdProcess, name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every link links and then answers EEXIST, as NFS does when a LINK's reply is lost and the retry finds the
    name taken. Before, the attempt took that for a lost race: it handed back the 50 messages its own chunk held
    (nsqd delivered them again: duplicates). After: the name holds its own file, so it wins and FINs them."""
    topic = name("nfs")
    publish(small_rdy, topic, bodies(60))
    link = os.link

    def retransmitted(src: str, dst: str) -> None:
        link(src, dst)
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)

    monkeypatch.setattr(os, "link", retransmitted)
    plan = planned(SliceAssignment(str(tmp_path), "q1", 1, "c", SliceSpec(topic, small_rdy.tcp_address, 0, 60)))
    task = SliceTask(plan, options(small_rdy, topic), None)
    rows = read_rows(task)
    assert sorted(r["body"] for r in rows) == sorted(bodies(60))
    assert (task.fresh_chunks, task.handed_back) == (2, 0)
    assert chunk_files(Path(task.slice.directory)) == ["000000.arrow", "000001.arrow", "000002.arrow"]
    stats = settled(small_rdy, topic)
    assert (stats["depth"], stats["requeue_count"]) == (0, 0)
    assert read_rows(SliceTask(plan, options(small_rdy, topic), None)) == rows  # the chunks hold those rows
