"""How an executor task holds what nsqd delivered: a slow downstream stage, FIN failures, the IDENTIFY settings it
sends, and dead letters (suspects tried apart, the envelope, MPUBs nsqd accepts, failures while dead-lettering).
Each task here is what one Spark task runs (`SliceTask(...).run()`) against a real nsqd."""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from nsqd_py.client.connection import Connection
from nsqd_py.client.errors import ServerError
from nsqd_py.client.protocol import Message, command
from nsqd_py.spark import dead_letter
from nsqd_py.spark.connect import open_connection
from nsqd_py.spark.dead_letter import DeadLetterError, decode_dead_letter
from nsqd_py.spark.options import OptionError, ReadOptions
from nsqd_py.spark.slice_task import SliceAssignment, SliceTask
from nsqd_py.spark.slices import SliceSpec
from nsqd_py.spark.trials import Trials
from tests.spark.util import bodies, hold_in_flight, planned, publish, source_options
from tests.support import NsqdProcess, channel_stats, drain, find_channel, wait_until

pytestmark = pytest.mark.slow




def task(location: Path, nsqd: NsqdProcess, topic: str, quota: int, opts: dict[str, str], batch: int = 1,
         cutoff: int | None = None) -> SliceTask:
    plan = planned(SliceAssignment(str(location), "q1", batch, "c", SliceSpec(topic, nsqd.tcp_address, 0, quota)))
    return SliceTask(plan, ReadOptions.parse(opts), cutoff)


def rows(batches: list[pa.RecordBatch]) -> list[tuple[str, bytes]]:
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    return list(zip(table.column("id").to_pylist(), table.column("body").to_pylist(), strict=True))



def back_in_channel(nsqd: NsqdProcess, topic: str, count: int) -> None:
    """Wait until ``count`` messages wait in channel c again (handed back, or timed out)."""
    wait_until(lambda: channel_stats(nsqd, topic, "c")["depth"] == count, timeout=15)


def deliver_and_requeue(nsqd: NsqdProcess, topic: str, count: int) -> list[Message]:
    """Deliver ``count`` messages of channel c once and hand them back, as a task that failed would."""
    conn, got = hold_in_flight(nsqd, topic, count)
    with conn:
        for msg in got:
            conn.req(msg.id)
        conn.nop()
    back_in_channel(nsqd, topic, count)
    return got


# -- a slow downstream stage --------------------------------------------------------------------------------------


def test_a_slow_stage_gets_no_duplicates_and_loses_nothing(small_rdy: NsqdProcess, name: Callable[[str], str],
                                                          tmp_path: Path) -> None:
    """The rows wait downstream longer than msg_timeout and than two heartbeats between chunks, while the task holds
    the next chunk nsqd already sent and availableNow's later messages."""
    topic = name("slow")
    publish(small_rdy, topic, bodies(120, "early"))
    cutoff = time.time_ns()
    publish(small_rdy, topic, bodies(20, "late"))
    slow = task(tmp_path, small_rdy, topic, 1000, source_options(small_rdy, topic, msgTimeout="1s",
                                                          heartbeatInterval="1s"), cutoff=cutoff)
    got: list[tuple[str, bytes]] = []
    for batch in slow.run():
        got.extend(rows([batch]))
        time.sleep(2.2)
    ids = [i for i, _ in got]
    assert len(ids) == len(set(ids)), "a message was read twice"
    assert sorted(b for _, b in got) == sorted(bodies(120, "early"))
    wait_until(lambda: channel_stats(small_rdy, topic, "c")["in_flight_count"] == 0)
    stats = channel_stats(small_rdy, topic, "c")
    assert stats["timeout_count"] == 0 and stats["depth"] == 20
    assert (slow.fin_failed, slow.handed_back, slow.dead_lettered) == (0, 20, 0)
    assert sorted(m.body for m in drain(small_rdy.tcp_port, topic, "c", rdy=50)) == sorted(bodies(20, "late"))


def test_a_stage_slower_than_max_msg_timeout_gets_no_duplicates(nsqd_factory: Callable[..., NsqdProcess],
                                                                name: Callable[[str], str], tmp_path: Path) -> None:
    """TOUCH cannot hold a message past nsqd's --max-msg-timeout: the next chunk nsqd sent goes back before that."""
    node = nsqd_factory("--max-rdy-count=50", "--max-msg-timeout=2s")
    topic = name("slower")
    publish(node, topic, bodies(100))
    slow = task(tmp_path, node, topic, 100, source_options(node, topic, msgTimeout="1s"))
    got: list[tuple[str, bytes]] = []
    for batch in slow.run():
        got.extend(rows([batch]))
        time.sleep(3)
    assert sorted(b for _, b in got) == sorted(bodies(100)) and len({i for i, _ in got}) == 100
    assert channel_stats(node, topic, "c")["timeout_count"] == 0 and slow.handed_back >= 50


def test_fin_failures_are_counted_and_reported(nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    topic = name("fin_failed")
    publish(nsqd, topic, bodies(10))
    reader = task(tmp_path, nsqd, topic, 10, source_options(nsqd, topic))
    publish_chunk = reader.slice.publish

    def defer_the_first(number: int, table: pa.Table) -> bool:
        """Another party takes one message away before the FIN (as nsqd does when it times out)."""
        if table.num_rows:
            first = table.column("id")[0].as_py().encode()
            assert reader.subscription.conn is not None
            reader.subscription.conn.send(command("REQ", first, "60000"))
        return publish_chunk(number, table)

    reader.slice.publish = defer_the_first  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="nsqd_py.spark.slice_task"):
        got = rows(list(reader.run()))
    assert len(got) == 10 and reader.fin_failed == 1
    assert "1 FIN of" in caplog.text and "failed" in caplog.text


# -- IDENTIFY ---------------------------------------------------------------------------------------------------


def test_identify_settings_reach_nsqd(nsqd: NsqdProcess, name: Callable[[str], str]) -> None:
    topic = name("identify")
    opts = ReadOptions.parse(source_options(nsqd, topic, clientId="query-7", hostname="spark-worker-3",
                                            sampleRate="40", heartbeatInterval="1s", outputBufferTimeout="50ms"))
    conn = open_connection(nsqd.tcp_address, opts.connect)
    heartbeats: list[float] = []
    nop = conn.nop
    conn.nop = lambda: (heartbeats.append(time.monotonic()), nop())[1]  # type: ignore[method-assign]
    try:
        conn.sub(topic, "c")
        assert (conn.negotiated["sample_rate"], conn.negotiated["output_buffer_timeout"]) == (40, 50)
        [client] = channel_stats(nsqd, topic, "c")["clients"]
        assert (client["client_id"], client["hostname"], client["sample_rate"]) == ("query-7", "spark-worker-3", 40)
        assert client["user_agent"].startswith("nsqd_py.spark/")
        assert conn.read_frame(2.5) is None and len(heartbeats) >= 2  # one a second, answered
    finally:
        conn.close()
    defaults = ReadOptions.parse(source_options(nsqd, topic)).connect.identify_fields()
    assert not {"client_id", "hostname", "sample_rate", "heartbeat_interval", "output_buffer_timeout"} & set(defaults)
    for bad, message in [({"sampleRate": "100"}, "sampleRate"), ({"heartbeatInterval": "soon"}, "heartbeat"),
                         ({"outputBufferTimeout": "-2"}, "outputBufferTimeout")]:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(source_options(nsqd, topic, **bad))


# -- dead letters -------------------------------------------------------------------------------------------------


def test_dead_letter_names_are_checked_when_the_options_are_parsed() -> None:
    base = {"channel": "c", "nsqdTcpAddresses": "h:4150", "maxAttempts": "3"}
    for topics in ("a" * 60, "ok,t#ephemeral"):
        with pytest.raises(OptionError, match="deadLetterTopic"):
            ReadOptions.parse({**base, "subscribe": topics})
        ReadOptions.parse({**base, "subscribe": topics, "deadLetterTopic": "parked"})  # an explicit one is fine
        ReadOptions.parse({**base, "subscribe": topics, "maxAttempts": "0"})  # no dead letters: no name needed


def test_a_storage_outage_does_not_dead_letter_healthy_messages(nsqd: NsqdProcess, name: Callable[[str], str],
                                                               tmp_path: Path) -> None:
    topic = name("outage")
    publish(nsqd, topic, bodies(20))
    opts = source_options(nsqd, topic, maxAttempts="1", msgTimeout="1s")

    def storage_down(number: int, table: pa.Table) -> bool:
        raise OSError("the write-ahead location is down")

    for batch in (1, 2, 3):  # every delivery ends in a failed publish: attempts reach 3
        failing = task(tmp_path, nsqd, topic, 20, opts, batch=batch)
        failing.slice.publish = storage_down  # type: ignore[method-assign]
        with pytest.raises(OSError, match="down"):
            list(failing.run())
        back_in_channel(nsqd, topic, 20)
    recovered = task(tmp_path, nsqd, topic, 20, opts, batch=4)
    got = pa.Table.from_batches(list(recovered.run()))
    assert sorted(got.column("body").to_pylist()) == sorted(bodies(20))
    assert min(got.column("attempts").to_pylist()) >= 4  # suspects, tried apart, and fine
    assert recovered.dead_lettered == 0 and find_channel(nsqd, f"{topic}_dead_letter", "c") is None
    assert not nsqd.stats(topic=f"{topic}_dead_letter")["topics"]
    assert not Trials(recovered.store, topic, nsqd.tcp_address).failed()  # nothing left marked


def _read_and_die_on_poison(plan: SliceAssignment, opts: dict[str, str]) -> None:
    """A task whose process dies when it publishes a chunk holding the poison (as an out-of-memory kill would)."""
    reader = SliceTask(plan, ReadOptions.parse(opts), None)
    publish_chunk = reader.slice.publish

    def publish_or_die(number: int, table: pa.Table) -> bool:
        if b"poison" in table.column("body").to_pylist():
            os._exit(3)
        return publish_chunk(number, table)

    reader.slice.publish = publish_or_die  # type: ignore[method-assign]
    for _ in reader.run():
        pass


def run_task_process(location: Path, nsqd: NsqdProcess, topic: str, opts: dict[str, str], batch: int) -> int | None:
    plan = planned(SliceAssignment(str(location), "q1", batch, "c", SliceSpec(topic, nsqd.tcp_address, 0, 100)))
    child = multiprocessing.get_context("fork").Process(target=_read_and_die_on_poison, args=(plan, opts))
    child.start()
    child.join(60)
    return child.exitcode


def test_only_a_message_whose_trial_alone_killed_the_task_is_dead_lettered(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path) -> None:
    topic = name("poison")
    healthy = bodies(9, "healthy")
    publish(nsqd, topic, [*healthy[:4], b"poison", *healthy[4:]])
    opts = source_options(nsqd, topic, maxAttempts="1", msgTimeout="1s")
    exits = []
    for batch in (1, 2, 3):  # in a chunk with others; in the group of suspects; alone
        exits.append(run_task_process(tmp_path, nsqd, topic, opts, batch))
        wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == 0, timeout=15)
    assert exits == [3, 3, 3]
    assert run_task_process(tmp_path, nsqd, topic, opts, 4) == 0  # dead-letters the poison, reads the rest
    read = [body for batch in (1, 2, 3, 4)
            for _, body in rows(list(task(tmp_path, nsqd, topic, 100, opts, batch=batch).run()))]
    assert sorted(read) == sorted(healthy)  # each once: the replays read the slices
    [letter] = drain(nsqd.tcp_port, f"{topic}_dead_letter", "check")
    dead = decode_dead_letter(letter.body)
    assert (dead.body, dead.topic, dead.channel, dead.nsqd, dead.attempts) == (
        b"poison", topic, "c", nsqd.tcp_address, 4)
    assert len(dead.id) == 16 and abs(dead.timestamp - time.time_ns()) < 120e9 and not dead.body_omitted
    assert channel_stats(nsqd, topic, "c")["depth"] == 0


def test_dead_letters_go_in_mpubs_nsqd_accepts(nsqd_factory: Callable[..., NsqdProcess], name: Callable[[str], str],
                                              tmp_path: Path) -> None:
    node = nsqd_factory("--max-body-size=4096", "--max-msg-size=1024")
    topic = name("big")
    sent = [*bodies(12, "dead", size=600), b"huge".ljust(1000, b"x")]  # its envelope is over --max-msg-size
    for body in sent:
        node.publish(topic, body)
    delivered = deliver_and_requeue(node, topic, len(sent))
    # pollTimeout: a task that sees nothing for that long ends its slice; 300 ms was too short on a loaded machine
    reader = task(tmp_path, node, topic, 100, source_options(node, topic, maxAttempts="1", pollTimeout="2s"))
    trials = Trials(reader.store, topic, node.tcp_address)
    for msg in delivered:  # as tasks that died twice trying each of them alone would have left them
        trials.start([msg])
        trials.start([msg])
    assert rows(list(reader.run())) == [] and reader.dead_lettered == len(sent)
    letters = [decode_dead_letter(m.body) for m in drain(node.tcp_port, f"{topic}_dead_letter", "check")]
    kept = sorted(d.body for d in letters if not d.body_omitted)
    assert kept == sorted(sent[:12])
    [omitted] = [d for d in letters if d.body_omitted]
    assert (omitted.body, omitted.body_size, omitted.attempts) == (b"", 1000, 2)
    assert channel_stats(node, topic, "c")["depth"] == 0 and not trials.failed()


def test_a_failure_while_dead_lettering_fails_the_task_and_hands_everything_back(
        nsqd: NsqdProcess, name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = name("dl_fails")
    publish(nsqd, topic, [b"dead", *bodies(5)])
    delivered = deliver_and_requeue(nsqd, topic, 6)
    opts = source_options(nsqd, topic, maxAttempts="1", msgTimeout="10s")
    first = task(tmp_path, nsqd, topic, 100, opts)
    for _ in range(2):  # two tasks died trying it alone
        Trials(first.store, topic, nsqd.tcp_address).start([m for m in delivered if m.body == b"dead"])

    def refused(self: Connection, topic: str, bodies: list[bytes]) -> None:
        raise ServerError("E_PUB_FAILED PUB failed exiting")

    monkeypatch.setattr(Connection, "mpub", refused)
    with pytest.raises(DeadLetterError, match=f"{topic}_dead_letter.*E_PUB_FAILED"):
        list(first.run())
    monkeypatch.undo()
    back_in_channel(nsqd, topic, 6)  # at once: handed back, not left to time out
    assert channel_stats(nsqd, topic, "c")["timeout_count"] == 0 and first.handed_back == 6

    second = task(tmp_path, nsqd, topic, 100, opts, batch=2)  # the next delivery dead-letters it
    assert sorted(b for _, b in rows(list(second.run()))) == sorted(bodies(5))
    assert [decode_dead_letter(m.body).body for m in drain(nsqd.tcp_port, f"{topic}_dead_letter", "x")] == [b"dead"]
    assert second.dead_lettered == 1


def test_the_envelope_keeps_what_nsq_knew_about_the_message() -> None:
    msg = Message(b"0123456789abcdef", b"\x00body\n", 1_700_000_000_123_456_789, 7)
    letter = dead_letter.DeadLetter.of(msg, "clicks", "spark", "10.0.0.1:4150")
    data = letter.encode()
    assert data.startswith(dead_letter.MAGIC)
    decoded = decode_dead_letter(data)
    assert decoded == letter and decoded.body == b"\x00body\n" and decoded.id == "0123456789abcdef"
    assert decode_dead_letter(letter.encode(omit_body=True)).body_omitted
    with pytest.raises(ValueError, match="dead letter"):
        decode_dead_letter(b"just a body")
