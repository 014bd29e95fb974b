"""Retention under the project's fault harnesses (issue 46 acceptance: "kill -9 and power loss with retention on:
everything acknowledged is still replayable after the crash").

nsqd runs at the durable settings with --topic-retention=1h and small segments (the retained log and the disk queues
roll under the load). Publishers send PUB, MPUB and DPUB over TCP and /pub over HTTP while a consumer FINs on channel
c (tests/persistence/test_durable_soak.py's Load, its TCP publishers sending DPUBs too); nsqd is killed with SIGKILL
(tests/persistence/test_durable_soak.py), or killed and then the power goes (tests/persistence/test_power_loss.py's
FUSE layer drops every write no completed fsync covers), and restarted on the same data dir, a few times. At the end
`POST /channel/create?start=earliest` replays the topic into a new channel, which is drained:

* every acknowledged message is in the replay (FINed on c or not: retention keeps both);
* the retained log keeps messages "in the order it accepted them" (docs/operations.md, Retention and replay), and a
  publisher waits for each OK before its next publish, so each publisher's messages come in its order;
* a replayed message has the id and timestamp it was delivered with on c;
* under kill -9 alone (the page cache survives) whatever c delivered, acknowledged or not, is in the replay too;
* channel mid, made with start=earliest at the second lifetime's start and consumed slowly, so its replay is under
  way at the crashes and resumes from its cursor, holds (FINed or drained at the end) every acknowledged message.

Duplicates in the replay are counted and printed, not asserted zero."""

from __future__ import annotations

import itertools
import os
import signal
import struct
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.persistence import test_power_loss as power_loss
from tests.persistence.test_durable_soak import Load
from tests.persistence.test_power_loss import NsqdOnMount, PowerLossMount
from tests.support import FRAME_MESSAGE, FRAME_RESPONSE, Message, NsqdProcess, RawConn, drain, wait_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

#: the power-loss harness's fixture: powerloss_fs.py mounted over a backing dir, unmounted again afterwards
fuse_mount = power_loss.fuse_mount

TOPIC, LIVE, REPLAY = "soak", "c", "replay"  # Load publishes to "soak" and consumes "soak/c"
MID = "mid"  # made with start=earliest at the second lifetime's start: a replay under way at the crashes
#: the soak's durable settings (test_durable_soak.FLAGS), with smaller files so the retained log rolls often
RETENTION = ("--mem-queue-size=0", "--sync-every=1", "--max-bytes-per-file=16384", "--topic-retention=1h")
KILLS = 3
POWER_LOSSES = 2  # more only while no power loss has yet found an unsynced write to drop


class RetentionLoad(Load):
    """The soak's Load (two TCP publishers, one HTTP publisher, one consumer FINing on c); its TCP publishers send
    PUB, MPUB and DPUB (short delays), a little slower (small counts: the final replay stays short); the consumer
    keeps the id and timestamp of each delivery."""

    mpub_size = 20
    dpub_delay_ms = staticmethod(lambda i: 50 + (i * 37) % 300)
    pause = 0.003

    def __init__(self, proc: NsqdProcess, tag: str, acknowledged: list[bytes], finished: set[bytes],
                 delivered: dict[bytes, tuple[bytes, int]], mid: Counter[bytes] | None = None) -> None:
        self.delivered = delivered  # before Load starts the threads
        super().__init__(proc, tag, acknowledged, finished)
        if mid is not None:  # a consumer on the channel replaying since round 1 too, FINing (its FINs counted)
            thread = threading.Thread(target=self._consume_mid, args=(mid,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _consume(self, n: int) -> None:
        try:
            conn = RawConn(self.proc.tcp_port)
            conn.identify()
            conn.sub(TOPIC, LIVE)
            conn.send("RDY 100")
            while not self._stop.is_set():
                msg = conn.message()
                self.delivered[msg.body] = (msg.id, msg.timestamp)
                conn.send(b"FIN " + msg.id)
                self.finished.add(msg.body)
        except (OSError, ConnectionError, struct.error, AssertionError):
            return


    def _consume_mid(self, fins: Counter[bytes]) -> None:
        try:
            conn = RawConn(self.proc.tcp_port)
            conn.identify()
            conn.sub(TOPIC, MID)
            conn.send("RDY 20")  # slower than c: the replay is still under way when the kill comes
            while not self._stop.is_set():
                msg = conn.message()
                conn.send(b"FIN " + msg.id)
                fins[msg.body] += 1
        except (OSError, ConnectionError, struct.error, AssertionError):
            return


def _order_key(body: bytes) -> tuple[str, tuple[int, int]]:
    """The publisher of a body (`k0-tcp1`, `k2-http3`) and its place in that publisher's order."""
    tag, source, i, *rest = body.decode().split("-")
    j = int(rest[0]) if rest and rest[0] != "d" else 0
    return f"{tag}-{source}", (int(i), j)


def _kind(body: bytes) -> str:
    if body.endswith(b"-d"):
        return "DPUB"
    if b"-http" in body:
        return "HTTP PUB"
    return "MPUB" if body.count(b"-") == 3 else "PUB"


def _alive(proc: NsqdProcess) -> None:
    assert proc.process is not None and proc.process.poll() is None, f"nsqd died under the load:\n{proc.log()}"


def _load_a_while(proc: NsqdProcess, acknowledged: list[bytes], round_no: int, at_least: int) -> None:
    """Until this lifetime got ``at_least`` messages acknowledged, then a little longer each round, so the kill
    lands somewhere else in the write/sync cycle each time."""
    before = len(acknowledged)
    wait_until(lambda: len(acknowledged) - before >= at_least, timeout=60, interval=0.05,
               what="the load to get going")
    time.sleep(0.2 + 0.3 * round_no)
    _alive(proc)


def _replay(proc: NsqdProcess) -> tuple[dict, list[Message]]:
    """Replay the topic from the earliest retained message into a new channel and drain it: the answer, and the
    messages in delivery order (until as many as it announced came, then a moment more for any extra copy)."""
    reply = proc.request("POST", f"/channel/create?topic={TOPIC}&channel={REPLAY}&start=earliest")
    assert reply.status == 200, (reply.status, reply.body)
    answer = reply.json()
    conn = RawConn(proc.tcp_port, timeout=30)
    conn.identify(output_buffer_timeout=-1)
    assert conn.sub(TOPIC, REPLAY) == (FRAME_RESPONSE, b"OK")
    conn.send("RDY 500")
    got: list[Message] = []
    deadline = time.monotonic() + 45
    conn.sock.settimeout(5.0)
    try:
        while time.monotonic() < deadline:
            if len(got) >= answer["messages"]:
                conn.sock.settimeout(0.5)
            try:
                ftype, data = conn.frame()
            except TimeoutError:
                break
            if ftype == FRAME_MESSAGE:
                msg = Message.parse(data)
                got.append(msg)
                conn.send(b"FIN " + msg.id)
    finally:
        conn.close()
    return answer, got


def _check(name: str, acknowledged: list[bytes], delivered: dict[bytes, tuple[bytes, int]], answer: dict,
           replayed: list[Message], data: Path, extra: str = "") -> dict[str, list]:
    """Print the counts; return what went wrong, by kind."""
    bodies = Counter(m.body for m in replayed)
    first: dict[bytes, Message] = {}
    for msg in replayed:
        first.setdefault(msg.body, msg)
    missing = [body for body in acknowledged if body not in bodies]
    delivered_missing = [body for body in delivered if body not in bodies]
    # each publisher's messages, in the order the replay gave them (first copies), must be in its publish order
    last: dict[str, tuple[int, int]] = {}
    out_of_order: list[bytes] = []
    for body in first:
        publisher, place = _order_key(body)
        if publisher in last and place <= last[publisher]:
            out_of_order.append(body)
        last[publisher] = place
    changed = [body for body, (msg_id, ts) in delivered.items()
               if body in first and (first[body].id, first[body].timestamp) != (msg_id, ts)]
    attempts = [m.body for m in replayed if m.attempts != 1]
    segments = len(list(data.glob(f"{TOPIC}.retained.*.dat")))
    print(f"\n{name}: acknowledged {len(acknowledged)} ({len(set(acknowledged))} distinct; by publish: "
          f"{dict(Counter(_kind(b) for b in acknowledged))}); delivered on c {len(delivered)}; replay announced "
          f"{answer['messages']}, replayed {len(replayed)} ({len(bodies)} distinct, "
          f"{len(set(bodies) - set(acknowledged))} never acknowledged), duplicates "
          f"{sum(c - 1 for c in bodies.values())}; retained segments {segments}{extra}")
    print(f"{name}: missing {len(missing)} {dict(Counter(_kind(b) for b in missing))}; delivered on c but not "
          f"replayed {len(delivered_missing)}; out of publisher order {len(out_of_order)}; id or timestamp changed "
          f"{len(changed)}; replayed with attempts other than 1: {len(attempts)}")
    assert segments >= 2, "the retained log never rolled: small files were meant to make it"
    return {"missing": missing, "delivered_missing": delivered_missing, "out_of_order": out_of_order,
            "changed": changed, "attempts": attempts}


def _assert_sound(found: dict[str, list], acknowledged: list[bytes], delivered_must_replay: bool) -> None:
    missing = found["missing"]
    assert not missing, f"lost {len(missing)} of {len(acknowledged)} acknowledged from the replay, e.g. {missing[:5]}"
    if delivered_must_replay:
        assert not found["delivered_missing"], f"delivered on c, not replayed: {found['delivered_missing'][:5]}"
    assert not found["out_of_order"], f"out of publisher order in the replay: {found['out_of_order'][:5]}"
    assert not found["changed"], f"replayed with another id or timestamp: {found['changed'][:5]}"
    assert not found["attempts"], f"replayed with attempts other than 1 (0 in the log): {found['attempts'][:5]}"


def _start_mid(proc: NsqdProcess) -> None:
    reply = proc.request("POST", f"/channel/create?topic={TOPIC}&channel={MID}&start=earliest")
    assert reply.status == 200, (reply.status, reply.body)
    print(f"\nchannel {MID} made replaying {reply.json()['messages']} retained messages")


def _check_mid(name: str, proc: NsqdProcess, acknowledged: list[bytes], fins: Counter[bytes]) -> list[bytes]:
    """Channel mid (a replay from the earliest, made in the second lifetime, crashed mid-way, resumed at each
    restart from its cursor, with live publishes on top): drained, it and its FINs must cover every acknowledged
    message. Returns those missing; prints the duplicates (a replay batch whose cursor a crash cut comes again)."""
    back = Counter(m.body for m in drain(proc.tcp_port, TOPIC, MID, idle=2.0, limit=60, output_buffer_timeout=50))
    missing = [body for body in acknowledged if body not in fins and body not in back]
    print(f"{name}, channel {MID}: FINed {len(fins)} (FINed twice {sum(1 for c in fins.values() if c > 1)}), "
          f"drained at the end {len(back)} (after a FIN {sum(1 for b in back if b in fins)}, twice "
          f"{sum(1 for c in back.values() if c > 1)}); missing {len(missing)} "
          f"{dict(Counter(_kind(b) for b in missing))}")
    return missing


def _create(proc: NsqdProcess) -> None:
    for target in (f"/topic/create?topic={TOPIC}", f"/channel/create?topic={TOPIC}&channel={LIVE}"):
        reply = proc.request("POST", target)
        assert reply.status == 200, (target, reply.status, reply.body)


def test_kill_9_with_retention_replays_everything_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "d"
    acknowledged: list[bytes] = []
    finished: set[bytes] = set()
    delivered: dict[bytes, tuple[bytes, int]] = {}
    mid: Counter[bytes] = Counter()
    procs: list[NsqdProcess] = []
    try:
        for kill in range(KILLS):
            proc = NsqdProcess(data, *RETENTION).start()
            procs.append(proc)
            if kill == 0:
                _create(proc)
            elif kill == 1:
                _start_mid(proc)
            load = RetentionLoad(proc, f"k{kill}", acknowledged, finished, delivered, mid if kill else None)
            try:
                _load_a_while(proc, acknowledged, kill, at_least=400)
            finally:
                proc.stop(sig=signal.SIGKILL)
                load.stop()
        proc = NsqdProcess(data, *RETENTION).start()
        procs.append(proc)
        answer, replayed = _replay(proc)
        _alive(proc)
        found = _check("kill -9", acknowledged, delivered, answer, replayed, data)
        mid_missing = _check_mid("kill -9", proc, acknowledged, mid)
        _alive(proc)
        _assert_sound(found, acknowledged, delivered_must_replay=True)
        assert not mid_missing, f"channel {MID} lost {len(mid_missing)} acknowledged, e.g. {mid_missing[:5]}"
    finally:
        for proc in procs:
            proc.stop(sig=signal.SIGKILL)


class RetentionOnMount(NsqdOnMount):
    """nsqd on the power-loss mount at the durable settings, with retention and small files."""

    def __init__(self, log_dir: Path, data: Path) -> None:
        super().__init__(log_dir, data)
        self.flags.extend(RETENTION[2:])


@pytest.mark.skipif(not Path("/dev/fuse").exists() or os.geteuid() != 0, reason="needs /dev/fuse and root to mount")
def test_power_loss_with_retention_replays_everything_acknowledged(fuse_mount: PowerLossMount,
                                                                   tmp_path: Path) -> None:
    data = fuse_mount.mountpoint / "data"
    data.mkdir()
    acknowledged: list[bytes] = []
    finished: set[bytes] = set()
    delivered: dict[bytes, tuple[bytes, int]] = {}
    mid: Counter[bytes] = Counter()
    for round_no in itertools.count():
        if round_no >= POWER_LOSSES and sum(fuse_mount.dropped()) > 0:
            break
        # a crash that found every write synced tested nothing: one more round then, a few at most
        assert round_no < POWER_LOSSES + 4, "no unsynced write was ever dropped: the crashes tested nothing"
        nsqd = RetentionOnMount(tmp_path / f"log{round_no}", data).start()
        if round_no == 0:
            _create(nsqd)
        elif round_no == 1:
            _start_mid(nsqd)
        load = RetentionLoad(nsqd, f"p{round_no}", acknowledged, finished, delivered, mid if round_no else None)
        try:
            _load_a_while(nsqd, acknowledged, round_no, at_least=400)
        finally:
            nsqd.stop(sig=signal.SIGKILL)  # the machine dies under load: the process first, then the disk's cache
            load.stop()
        fuse_mount.power_loss()
        fuse_mount.mount()
    nsqd = RetentionOnMount(tmp_path / "final", data).start()
    try:
        answer, replayed = _replay(nsqd)
        _alive(nsqd)
        found = _check("power loss", acknowledged, delivered, answer, replayed, data,
                       extra=f"; unsynced bytes dropped {fuse_mount.dropped()}")
        mid_missing = _check_mid("power loss", nsqd, acknowledged, mid)
        _alive(nsqd)
    finally:
        nsqd.stop()
    # a delivery on c may be of a publish never acknowledged, whose unsynced records the power loss took
    _assert_sound(found, acknowledged, delivered_must_replay=False)
    assert not mid_missing, f"channel {MID} lost {len(mid_missing)} acknowledged, e.g. {mid_missing[:5]}"
