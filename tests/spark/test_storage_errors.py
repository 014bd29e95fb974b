"""A publish that fails after its offer was stored (issue 38, case 5): the task asks the write-ahead location who
won the chunk and settles its messages by the answer, instead of failing with them in hand (the retry then adopted
the stored offer while nsqd delivered the same messages again after msgTimeout). Tasks run against a real nsqd as
one Spark task runs them (`SliceTask(...).run()`); the object store is a local directory behind a filesystem whose
requests fail as S3's do."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from nsqd_py.client.protocol import id_commands
from nsqd_py.spark import slice_task
from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.schema import ARROW_SCHEMA, message_table
from nsqd_py.spark.slice_task import SliceAssignment, SliceTask, UnsettledChunkError
from nsqd_py.spark.slices import SliceSpec, SliceStore
from tests.spark.stores import LocalStore, use_store
from tests.spark.util import bodies, hold_in_flight, planned, publish, source_options
from tests.support import NsqdProcess, channel_stats, drain

pytestmark = pytest.mark.slow

#: S3's answers, as pyarrow raises them: a reply lost after the request took effect, and a request refused
LOST_REPLY = "AWS Error NETWORK_CONNECTION during {} operation: curlCode: 56, Failure when receiving data from the peer"
SLOW_DOWN = "AWS Error SLOW_DOWN during {} operation: Please reduce your request rate."


class _FlakyStore(LocalStore):
    """An object store over a local directory (moves replace their target, as S3's do through pyarrow) where one
    request's reply is lost after it took effect, as a connection reset after S3 wrote the object: the offer's move
    (S3's CopyObject: the copy is made, the source stays) or the `decided` marker's PUT. The ``refusals`` requests
    after it are refused (503 SlowDown: nothing done), as while S3 throttles or a NameNode fails over."""

    def __init__(self, root: Path, lose: str, refusals: int, meanwhile: Callable[[], None] = lambda: None) -> None:
        super().__init__(root)
        self.lose = lose
        self.refusals = refusals
        #: what another attempt does while the reply is on its way
        self.meanwhile = meanwhile
        self.lost = False

    def _request(self, operation: str) -> None:
        if self.lost and self.refusals > 0:
            self.refusals -= 1
            raise OSError(SLOW_DOWN.format(operation))

    def _lose_reply(self, operation: str) -> None:
        self.lost = True
        self.meanwhile()
        raise OSError(LOST_REPLY.format(operation))

    def move(self, src: str, dest: str) -> None:
        self._request("CopyObject")
        if self.lose == "offer" and not self.lost and src.endswith(".tmp"):
            self.inner.copy_file(src, dest)
            self._lose_reply("CopyObject")
        self.inner.move(src, dest)

    def open_output_stream(self, path: str, metadata: dict) -> pa.NativeFile:
        self._request("PutObject")
        if self.lose == "decided" and not self.lost and "/decided." in path:
            with self.inner.open_output_stream(path):
                pass
            self._lose_reply("PutObject")
        return self.inner.open_output_stream(path, metadata=metadata)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        self._request("HeadObject")
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        self._request("ListObjectsV2")
        return self.inner.get_file_info(selector)

    def open_input_file(self, path: str) -> pa.NativeFile:
        self._request("GetObject")
        return self.inner.open_input_file(path)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        self._request("GetObject")
        return self.inner.open_input_stream(path)

    def create_dir(self, path: str, recursive: bool) -> None:
        self._request("PutObject")
        self.inner.create_dir(path, recursive=recursive)


def flaky_location(monkeypatch: pytest.MonkeyPatch, store: _FlakyStore) -> str:
    """A location `flaky://wa` that resolves to ``store``."""
    use_store(monkeypatch, "flaky", store)
    return "flaky://wa"


def one_slice(nsqd: NsqdProcess, topic: str, location: str, quota: int) -> tuple[SliceAssignment, ReadOptions]:
    plan = planned(SliceAssignment(location, "q", 1, "c", SliceSpec(topic, nsqd.tcp_address, 0, quota)))
    return plan, ReadOptions.parse(source_options(nsqd, topic, msgTimeout="1s"))


def read_bodies(plan: SliceAssignment, opts: ReadOptions) -> list[bytes]:
    table = pa.Table.from_batches(list(SliceTask(plan, opts, None).run()), ARROW_SCHEMA)
    return sorted(table.column("body").to_pylist())


def counters(nsqd: NsqdProcess, topic: str) -> tuple[int, int, int, int]:
    stats = channel_stats(nsqd, topic, "c")
    return stats["depth"], stats["in_flight_count"], stats["requeue_count"], stats["timeout_count"]


@pytest.mark.parametrize(("lose", "refusals"), [("offer", 0), ("decided", 0), ("offer", 3)],
                         ids=["offer-moved", "decided-written", "offer-moved-then-throttled"])
def test_a_reply_lost_after_the_offer_was_stored_fins_the_messages_once(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        lose: str, refusals: int) -> None:
    """Before: the publish's error failed the task holding its 20 messages unFINed; the retry adopted the stored
    offer and nsqd delivered the 20 again after msgTimeout (1s): every row twice. After: the task asks who won
    (again while the store refuses), finds its own offer, FINs the 20 and ends; nothing comes back."""
    topic = name("lostreply")
    store = _FlakyStore(tmp_path, lose, refusals)
    sent = bodies(20)
    publish(nsqd, topic, sent)
    plan, opts = one_slice(nsqd, topic, flaky_location(monkeypatch, store), 20)
    assert read_bodies(plan, opts) == sorted(sent)
    assert store.lost and store.refusals == 0  # the reply was lost, and every refusal was met
    assert counters(nsqd, topic) == (0, 0, 0, 0)  # FINed: nothing in flight, handed back or timed out
    assert drain(nsqd.tcp_port, topic, "c", idle=1.5) == []  # nor anything again after msgTimeout
    assert read_bodies(plan, opts) == sorted(sent)  # a replay: the same rows


def test_a_rival_offer_that_won_while_the_reply_was_lost_gets_the_messages_handed_back(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the reply to this attempt's offer is lost, another attempt (holding 20 other messages) offers chunk 0
    too and decides its own. Before: the error failed the task holding its 20 unFINed until msgTimeout. After: the
    task learns it lost, hands its 20 back at once and yields the winner's rows."""
    topic = name("rival")
    publish(nsqd, topic, bodies(40))
    store = _FlakyStore(tmp_path, "offer", 0)
    plan, opts = one_slice(nsqd, topic, flaky_location(monkeypatch, store), 20)
    conn, theirs = hold_in_flight(nsqd, topic, 20)

    def rival_wins() -> None:
        table = message_table(theirs, topic, "c", [nsqd.tcp_address] * len(theirs))
        assert SliceStore(plan.location, plan.query).slice(plan.batch, plan.spec.name).publish(0, table)

    store.meanwhile = rival_wins
    try:
        assert read_bodies(plan, opts) == sorted(m.body for m in theirs)
        assert counters(nsqd, topic)[:3] == (20, 20, 20)  # ours handed back; theirs in flight
        conn.send(id_commands("FIN", [m.id for m in theirs]))
    finally:
        conn.close()


def test_a_location_that_stays_down_after_the_offer_hands_the_messages_back(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store refuses every request after the offer's lost reply, past the task's bound. Before: the task failed
    with the first error and held its 20 messages until msgTimeout. After: it asks while the bound lasts, then hands
    them back (not FINed: whether the offer was stored is unknown) and fails saying so. The offer was stored, so the
    retry adopts it and the 20 wait in the channel for a later batch: read twice, never lost."""
    monkeypatch.setattr(slice_task, "_SETTLE_PAUSES", (0.05, 0.1))
    topic = name("down")
    store = _FlakyStore(tmp_path, "offer", refusals=1_000_000)
    sent = bodies(20)
    publish(nsqd, topic, sent)
    plan, opts = one_slice(nsqd, topic, flaky_location(monkeypatch, store), 20)
    with pytest.raises(UnsettledChunkError, match=r"failed 3 times.*20 messages were handed back"):
        read_bodies(plan, opts)
    assert counters(nsqd, topic)[:3] == (20, 0, 20)
    store.refusals = 0  # the store is back
    assert read_bodies(plan, opts) == sorted(sent)
    assert counters(nsqd, topic)[:2] == (20, 0)


def test_a_failed_directory_fsync_after_the_link_hands_the_chunk_back(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local link won, then the directory's fsync failed (EIO). Whether the chunk survives a crash is unknown,
    and a later fsync that succeeds would not tell (the kernel may have dropped what it failed to write), so FINing
    could lose the 20 messages. Before: the error failed the task holding them until msgTimeout. After: it hands
    them back at once and fails saying why; the chunk stayed, so the retry reads it and the 20 wait in the channel
    for a later batch: read twice, never lost."""
    fsync = os.fsync
    failed: list[int] = []

    def fsync_failing_once_for_directories(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode) and not failed:
            failed.append(fd)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_failing_once_for_directories)
    topic = name("fsync")
    sent = bodies(20)
    publish(nsqd, topic, sent)
    plan, opts = one_slice(nsqd, topic, str(tmp_path), 20)
    with pytest.raises(UnsettledChunkError, match="holds this attempt's 20 messages, but making it durable failed"):
        read_bodies(plan, opts)
    assert failed and counters(nsqd, topic)[:3] == (20, 0, 20)
    assert read_bodies(plan, opts) == sorted(sent)
    assert counters(nsqd, topic)[:2] == (20, 0)
