"""Executor-mode reads without Spark: slices planned from /stats, read from nsqd by tasks that publish before they
FIN, replayed from the write-ahead location, and attempts that lose the race to publish handing their messages
back. Each task here is what one Spark task runs (`SliceTask(...).run()`) against a real nsqd."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from nsqd_py.client.connection import Connection
from nsqd_py.client.errors import NSQConnectionError
from nsqd_py.client.protocol import Message
from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.planner import ChannelState, UnreachableError, plan_slices
from nsqd_py.spark.reader import NSQStreamReader
from nsqd_py.spark.slice_task import SliceAssignment, SliceTask
from nsqd_py.spark.slices import NotSharedError, SliceSpec, SliceStore
from nsqd_py.testing import free_port
from tests.spark.util import bodies, http_address, planned, publish, source_options
from tests.support import NsqdProcess, channel_stats, drain, find_channel, wait_until

pytestmark = pytest.mark.slow



def options(nsqd: NsqdProcess, topic: str, **extra: str) -> ReadOptions:
    return ReadOptions.parse(source_options(nsqd, topic, **extra))


def plan(location: Path, nsqd: NsqdProcess, topic: str, quota: int, index: int = 0) -> SliceAssignment:
    return planned(SliceAssignment(str(location), "q1", 1, "c", SliceSpec(topic, nsqd.tcp_address, index, quota)))


def rows(batches: list[pa.RecordBatch]) -> list[tuple[str, bytes]]:
    table = pa.Table.from_batches(batches)
    return list(zip(table.column("id").to_pylist(), table.column("body").to_pylist(), strict=True))



def test_plan_splits_rows_by_depth_and_partitions_by_share() -> None:
    states = [ChannelState("t", "a:1", 300), ChannelState("t", "b:1", 100), ChannelState("u", "a:1", 0)]
    everything = plan_slices(states, None, None, None)
    assert [(s.nsqd, s.index, s.quota) for s in everything] == [("a:1", 0, 300), ("b:1", 0, 100)]
    capped = plan_slices(states, 200, 1000, 4)
    assert sum(s.quota for s in capped) == 200
    assert [(s.nsqd, s.quota) for s in capped] == [("a:1", 50), ("a:1", 50), ("a:1", 50), ("b:1", 50)]
    assert all(s.byte_quota == 250 for s in capped)
    assert plan_slices(states, 2, None, 8) == plan_slices(states, 2, None, 2)  # never a partition without rows
    assert plan_slices([ChannelState("t", "a:1", 0)], None, None, 3) == []
    skewed = [ChannelState("t", "a:1", 1000), ChannelState("t", "b:1", 1), ChannelState("t", "c:1", 1)]
    assert [s.quota for s in plan_slices(skewed, 10, None, None)] == [8, 1, 1]  # every nsqd, never past the limit


def test_a_task_publishes_its_slice_and_a_replay_reads_it_back(nsqd: NsqdProcess, name: Callable[[str], str],
                                                              tmp_path: Path) -> None:
    topic = name("slice")
    publish(nsqd, topic, bodies(300))
    opts = options(nsqd, topic)
    first = rows(list(SliceTask(plan(tmp_path, nsqd, topic, 200), opts, None).run()))
    assert len(first) == 200 and len({i for i, _ in first}) == 200
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0)
    stats = channel_stats(nsqd, topic, "c")
    assert stats["depth"] == 100 and stats["message_count"] == 300  # 200 FINed: they are in the slice

    again = rows(list(SliceTask(plan(tmp_path, nsqd, topic, 200), opts, None).run()))
    assert again == first
    assert channel_stats(nsqd, topic, "c")["depth"] == 100  # the replay took nothing from nsqd


def test_the_losing_attempt_hands_its_messages_back(small_rdy: NsqdProcess, tmp_path: Path) -> None:
    topic, sent = "race", bodies(300)
    publish(small_rdy, topic, sent)
    opts = options(small_rdy, topic)
    loser = SliceTask(plan(tmp_path, small_rdy, topic, 200), opts, None)
    may_publish = threading.Event()
    publish_chunk = loser.slice.publish

    def held_back(number: int, table: pa.Table) -> bool:
        may_publish.wait(60)
        return publish_chunk(number, table)

    loser.slice.publish = held_back  # type: ignore[method-assign]
    loser_rows: list[pa.RecordBatch] = []
    thread = threading.Thread(target=lambda: loser_rows.extend(loser.run()))
    thread.start()
    # one chunk delivered, not published
    wait_until(lambda: (find_channel(small_rdy, topic, "c") or {}).get("in_flight_count") == 50)

    winner = rows(list(SliceTask(plan(tmp_path, small_rdy, topic, 200), opts, None).run()))
    may_publish.set()
    thread.join(60)
    assert rows(loser_rows) == winner and len(winner) == 200  # the same rows for both attempts

    wait_until(lambda: channel_stats(small_rdy, topic, "c")["in_flight_count"] == 0)
    stats = channel_stats(small_rdy, topic, "c")
    assert stats["depth"] == 100 and stats["requeue_count"] >= 50  # the loser's chunk came back
    rest = [m.body for m in drain(small_rdy.tcp_port, topic, "c", rdy=50)]
    assert sorted(rest + [body for _, body in winner]) == sorted(sent)  # nothing lost, nothing twice


def test_task_ends_when_nsqd_is_quiet_and_holds_back_later_messages(nsqd: NsqdProcess, name: Callable[[str], str],
                                                                   tmp_path: Path) -> None:
    topic = name("cutoff")
    publish(nsqd, topic, bodies(30, "early"))
    cutoff = time.time_ns()
    publish(nsqd, topic, bodies(20, "late"))
    got = rows(list(SliceTask(plan(tmp_path, nsqd, topic, 1000), options(nsqd, topic), cutoff).run()))
    assert sorted(body for _, body in got) == sorted(bodies(30, "early"))
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0)
    assert channel_stats(nsqd, topic, "c")["depth"] == 20  # the late ones went back


def test_a_message_over_max_attempts_is_tried_apart_and_read(nsqd: NsqdProcess, name: Callable[[str], str],
                                                             tmp_path: Path) -> None:
    """A requeue is no failure of the message: only a trial alone that killed its task makes a dead letter
    (test_consuming.py)."""
    topic = name("poison")
    publish(nsqd, topic, [b"poison", b"fine"])
    with Connection(nsqd.tcp_address).connect() as conn:  # deliver and requeue both once: attempts becomes 2
        conn.identify()
        conn.sub(topic, "c")
        conn.rdy(2)
        delivered = [conn.read_frame(5), conn.read_frame(5)]
        assert all(isinstance(m, Message) for m in delivered)
        poison = next(m for m in delivered if isinstance(m, Message) and m.body == b"poison")
        conn.rdy(0)  # or the requeued message comes straight back here
        conn.req(poison.id)
        fine = next(m for m in delivered if isinstance(m, Message) and m.body == b"fine")
        conn.fin(fine.id)
        conn.nop()
    publish(nsqd, topic, [b"new"])
    wait_until(lambda: channel_stats(nsqd, topic, "c")["depth"] == 2)
    got = rows(list(SliceTask(plan(tmp_path, nsqd, topic, 10), options(nsqd, topic, maxAttempts="1"), None).run()))
    assert [body for _, body in got] == [b"poison", b"new"]  # the suspect first, in a chunk of its own
    assert not nsqd.stats(topic=f"{topic}_dead_letter")["topics"]
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0)
    assert channel_stats(nsqd, topic, "c")["depth"] == 0


def test_unreachable_nsqd_ends_the_slice_or_fails_the_task(tmp_path: Path) -> None:
    gone = f"127.0.0.1:{free_port()}"
    opts = ReadOptions.parse({"subscribe": "t", "channel": "c", "nsqdTcpAddresses": gone,
                              "connectTimeout": "500ms"})
    task_plan = planned(SliceAssignment(str(tmp_path), "q1", 1, "c", SliceSpec("t", gone, 0, 10)))
    assert list(SliceTask(task_plan, opts, None).run()) == []
    strict = ReadOptions.parse({"subscribe": "t", "channel": "c", "nsqdTcpAddresses": gone,
                                "failOnUnreachable": "true"})
    with pytest.raises(NSQConnectionError, match="failOnUnreachable"):
        list(SliceTask(planned(SliceAssignment(str(tmp_path), "q1", 2, "c", SliceSpec("t", gone, 0, 10))), strict,
                       None).run())


def test_an_executor_that_cannot_see_the_location_says_so(nsqd: NsqdProcess, tmp_path: Path) -> None:
    task_plan = SliceAssignment(str(tmp_path / "not-shared"), "q1", 1, "c", SliceSpec("t", nsqd.tcp_address, 0, 10))
    with pytest.raises(NotSharedError, match="writeAheadLocation"):
        list(SliceTask(task_plan, options(nsqd, "t"), None).run())


def test_driver_plans_from_stats_and_commit_marks_the_batch(nsqd: NsqdProcess, name: Callable[[str], str],
                                                             tmp_path: Path) -> None:
    topic = name("plan")
    reader = NSQStreamReader(options(nsqd, topic, writeAheadLocation=str(tmp_path), minPartitions="2"))
    start = reader.initialOffset()
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start  # creates the channel: nothing yet
    publish(nsqd, topic, bodies(100))
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["batch"] == 1 and [s[3] for s in end["slices"]] == [50, 50]
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == end  # asked again: the same plan
    assert reader.reportLatestOffset()["depth"] == 100
    parts = reader.partitions(start, end)
    read = [rows(list(reader.read(part))) for part in parts]
    assert sorted(b for part in read for _, b in part) == sorted(bodies(100))
    assert not any(nsqd.stats(topic=topic)["topics"][0]["channels"][0]["clients"])  # the driver holds no subscription
    store = SliceStore(str(tmp_path), end["query"])
    assert store.batches() == [1] and store.batch_rows(1) == 100
    assert store.is_open(1)
    reader.commit(end)
    assert store.batches() == [1] and not store.is_open(1)  # kept for minBatchesToRetain batches (test_write_ahead)


def test_planning_skips_an_unreachable_nsqd_but_available_now_fails(nsqd: NsqdProcess, name: Callable[[str], str],
                                                                    tmp_path: Path) -> None:
    topic, gone = name("gone"), f"127.0.0.1:{free_port()}"
    publish(nsqd, topic, bodies(10))
    reader = NSQStreamReader(ReadOptions.parse({
        "subscribe": topic, "channel": "c", "nsqdTcpAddresses": f"{nsqd.tcp_address},{gone}",
        "nsqdHttpAddresses": f"{http_address(nsqd)},{gone}", "writeAheadLocation": str(tmp_path)}))
    start = reader.initialOffset()
    reader.latestOffset(start, reader.getDefaultReadLimit())  # creates the channel
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert {s[1] for s in end["slices"]} == {nsqd.tcp_address}  # the reachable one is read
    assert sum(s[3] for s in end["slices"]) == 10
    with pytest.raises(UnreachableError, match=gone):  # its snapshot of what to read
        reader.prepareForTriggerAvailableNow()


def test_min_offsets_wait_for_more_until_the_max_trigger_delay(nsqd: NsqdProcess, name: Callable[[str], str],
                                                               tmp_path: Path) -> None:
    topic = name("min")
    reader = NSQStreamReader(options(nsqd, topic, writeAheadLocation=str(tmp_path), minOffsetsPerTrigger="10",
                                     maxTriggerDelay="1s"))
    start = reader.initialOffset()
    reader.latestOffset(start, reader.getDefaultReadLimit())  # creates the channel
    publish(nsqd, topic, bodies(5))
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start  # 5 < 10: wait
    publish(nsqd, topic, bodies(5, "more"))
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert sum(s[3] for s in end["slices"]) == 10
    assert len([row for part in reader.partitions(start, end) for row in rows(list(reader.read(part)))]) == 10
    publish(nsqd, topic, bodies(5, "late"))
    assert reader.latestOffset(end, reader.getDefaultReadLimit()) == end  # waits again, from this batch on
    time.sleep(1.1)
    assert sum(s[3] for s in reader.latestOffset(end, reader.getDefaultReadLimit())["slices"]) == 5  # delay over


def test_a_slice_stops_at_its_byte_quota(nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    topic = name("bytes")
    publish(nsqd, topic, [b"x" * 100] * 50)
    task_plan = planned(SliceAssignment(str(tmp_path), "q1", 1, "c", SliceSpec(topic, nsqd.tcp_address, 0, quota=50,
                                                                              byte_quota=1000)))
    got = rows(list(SliceTask(task_plan, options(nsqd, topic), None).run()))
    assert len(got) == 10  # 10 bodies of 100 bytes
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0)
    assert channel_stats(nsqd, topic, "c")["depth"] == 40
