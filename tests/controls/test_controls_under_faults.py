"""The controls beyond nsqd under the project's fault harnesses (issue 45 acceptance): kill -9 soak at the durable
settings (tests/persistence/test_durable_soak.py's Load) and power loss (tests/persistence/test_power_loss.py's FUSE
layer) with --max-attempts=2 (dead letters to "soak.dead"), --persist-deferred (DPUB and REQ delays on disk) and,
under kill -9, a msg_ttl on a second channel. Publishers PUB, DPUB (short delays) and MPUB; consumers FIN some
messages, REQ some with a delay, let some time out, and keep doing it to a few until they are dead-lettered.

Every acknowledged message must be FINed at least once, or come back in the final drain, or be in the dead-letter
topic ("soak.dead", channel "dlq", made up front so it keeps every copy) - on the TTL channel it may instead have
expired (the expired counts of every lifetime, added up, must cover what is missing there). A message may arrive
twice, or be FINed and dead-lettered both (a crash cut its FIN or its move short): those duplicates are counted
and printed, not asserted zero."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import struct
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.persistence import test_power_loss as power_loss
from tests.persistence.test_durable_soak import FLAGS as SOAK_FLAGS
from tests.persistence.test_durable_soak import Load
from tests.persistence.test_power_loss import NsqdOnMount, PowerLossMount
from tests.support import (
    FRAME_ERROR,
    FRAME_MESSAGE,
    FRAME_RESPONSE,
    Message,
    NsqdProcess,
    RawConn,
    channel_stats,
    drain,
    wait_until,
)

pytestmark = [pytest.mark.process, pytest.mark.slow]

#: the power-loss harness's fixture: powerloss_fs.py mounted over a backing dir, unmounted again afterwards
fuse_mount = power_loss.fuse_mount

TOPIC, MAIN, TTL_CHANNEL, DEAD, DLQ = "soak", "c", "t", "soak.dead", "dlq"
CONTROLS = ("--max-attempts=2", "--persist-deferred")
TTL = "2s"
KILLS = 3
POWER_LOSSES = 2  # more only while no power loss has yet found an unsynced write to drop

#: what a consumer does with a delivery: ("FIN", 0), ("REQ", delay ms), or None (nothing: it times out)
Action = tuple[str, int] | None
Policy = Callable[[bytes, int], Action]


def _main_policy(body: bytes, attempts: int) -> Action:
    """Channel c (max 2 attempts): most FINed at once, some after a REQ (delayed or not) or a time-out, and some
    always REQed or always left to time out, so they go to the dead-letter topic at their third delivery."""
    kind = zlib.crc32(body) % 20
    if kind < 10:
        return ("FIN", 0)
    if kind < 13:
        return ("REQ", 300) if attempts == 1 else ("FIN", 0)
    if kind < 15:
        return None if attempts == 1 else ("FIN", 0)
    if kind < 17:
        return ("REQ", 200)
    if kind < 18:
        return None
    return ("REQ", 0) if attempts == 1 else ("FIN", 0)


def _ttl_policy(body: bytes, attempts: int) -> Action:
    """Channel t (msg_ttl 2s, no max attempts): most FINed, some REQed past their TTL (they expire), some left to
    time out once."""
    kind = zlib.crc32(body) % 10
    if kind == 8:
        return ("REQ", 2500)
    if kind == 9 and attempts == 1:
        return None
    return ("FIN", 0)


@dataclass
class Ledger:
    """What one channel's consumers did, over every lifetime of nsqd."""

    fins: Counter[bytes] = field(default_factory=Counter)  # FINs sent, by body
    refused: Counter[bytes] = field(default_factory=Counter)  # FINs nsqd answered E_FIN_FAILED to
    deliveries: int = 0

    def finished(self) -> set[bytes]:
        """Bodies with a FIN nsqd did not refuse (one cut short by a kill counts: it was on its way)."""
        return {body for body, sent in self.fins.items() if sent > self.refused[body]}


def consume(port: int, channel: str, policy: Policy, ledger: Ledger, stop: threading.Event,
            on_connect: Callable[[RawConn], None] = lambda conn: None, rdy: int = 1000) -> None:
    """Subscribe to ``channel`` of the soak topic and answer each delivery by ``policy`` until ``stop`` or the
    connection goes (the kill)."""
    ids: dict[bytes, bytes] = {}
    try:
        conn = RawConn(port, timeout=30)
        on_connect(conn)
        conn.identify(msg_timeout=1000)
        if conn.sub(TOPIC, channel) != (FRAME_RESPONSE, b"OK"):
            return
        conn.send(f"RDY {rdy}")
        while not stop.is_set():
            ftype, data = conn.frame()
            if ftype == FRAME_ERROR:
                code, _, rest = data.partition(b" ")
                if code == b"E_FIN_FAILED":  # "FIN <id> failed ...": it had timed out; it comes again
                    body = ids.get(rest.split(b" ")[1])
                    if body is not None:
                        ledger.refused[body] += 1
                continue
            if ftype != FRAME_MESSAGE:
                continue
            msg = Message.parse(data)
            ledger.deliveries += 1
            ids[msg.id] = msg.body
            action = policy(msg.body, msg.attempts)
            if action is None:
                continue
            verb, delay = action
            if verb == "FIN":
                conn.send(b"FIN " + msg.id)
                ledger.fins[msg.body] += 1  # counted as FINed only once the FIN is on its way
            else:
                conn.send(b"REQ " + msg.id + b" %d" % delay)
    except (OSError, ConnectionError, struct.error):
        return


class ControlsLoad(Load):
    """The soak's Load (two TCP publishers, one HTTP publisher, one consumer on c), its TCP publishers sending DPUBs
    with short delays among the PUBs and MPUBs, and its consumer answering by ``_main_policy``."""

    mpub_size = 10
    dpub_delay_ms = staticmethod(lambda i: 100 + (i * 37) % 700)
    pause = 0.005  # small counts: the final drain stays short

    def __init__(self, proc: NsqdProcess, tag: str, acknowledged: list[bytes], main: Ledger) -> None:
        self.main = main  # before Load starts the threads
        super().__init__(proc, tag, acknowledged, set())

    def _consume(self, n: int) -> None:
        consume(self.proc.tcp_port, MAIN, _main_policy, self.main, self._stop)


class TtlConsumer:
    """A consumer on the TTL channel, stopped on its own: its connection closed, nothing more can expire there."""

    def __init__(self, proc: NsqdProcess, ledger: Ledger) -> None:
        self._stop = threading.Event()
        self._conns: list[RawConn] = []
        self._thread = threading.Thread(target=consume, args=(proc.tcp_port, TTL_CHANNEL, _ttl_policy, ledger,
                                                              self._stop, self._conns.append, 200), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(15)


def _create(proc: NsqdProcess, ttl_channel: bool) -> None:
    """The soak topic's channels, and the dead-letter topic with its channel, before any publish."""
    targets = [f"/topic/create?topic={TOPIC}", f"/channel/create?topic={TOPIC}&channel={MAIN}",
               f"/topic/create?topic={DEAD}", f"/channel/create?topic={DEAD}&channel={DLQ}"]
    if ttl_channel:
        targets += [f"/channel/create?topic={TOPIC}&channel={TTL_CHANNEL}",
                    f"/channel/settings?topic={TOPIC}&channel={TTL_CHANNEL}&msg_ttl={TTL}&max_attempts=0"]
    for target in targets:
        reply = proc.request("POST", target)
        assert reply.status == 200, (target, reply.status, reply.body)


def _load_until_dead_letters(proc: NsqdProcess, acknowledged: list[bytes], round_no: int) -> None:
    """Until this lifetime took a few hundred messages and moved a few to the dead-letter topic, then a little
    longer each round, so the kill lands somewhere else each time."""
    before = len(acknowledged)
    wait_until(lambda: len(acknowledged) - before > 300, timeout=60, interval=0.05, what="the load to get going")
    wait_until(lambda: channel_stats(proc, TOPIC, MAIN)["dead_letter_count"] >= 3, timeout=60, interval=0.05,
               what="dead letters")
    time.sleep(0.2 + 0.3 * round_no)


def _alive(proc: NsqdProcess) -> None:
    assert proc.process is not None and proc.process.poll() is None, f"nsqd died under the load:\n{proc.log()}"


def _drain_all(proc: NsqdProcess) -> tuple[Counter[bytes], Counter[bytes]]:
    """Drain c (its last deliveries past max attempts go to the dead-letter topic meanwhile), wait until it holds
    nothing, then drain the dead-letter topic's channel: the bodies each gave back."""
    port = proc.tcp_port
    back = Counter(m.body for m in drain(port, TOPIC, MAIN, idle=2.0, limit=120, output_buffer_timeout=50))

    def main_empty() -> bool:
        row = channel_stats(proc, TOPIC, MAIN)
        return (row["depth"], row["in_flight_count"], row["deferred_count"]) == (0, 0, 0)

    wait_until(main_empty, timeout=60, interval=0.1, what="channel c to hold nothing")
    dead = Counter(m.body for m in drain(port, DEAD, DLQ, idle=2.0, limit=120, output_buffer_timeout=50))
    return back, dead


def _kind(body: bytes) -> str:
    """How a body was published (ControlsLoad's and Load's names for them)."""
    if body.endswith(b"-d"):
        return "DPUB"
    if b"-http" in body:
        return "HTTP PUB"
    return "MPUB" if body.count(b"-") == 3 else "PUB"


#: what nsqd logs for the start-up probe's connection (tests/support.py's start: TCP connect, close)
PROBE = "failed to read protocol version - EOF"


def _errors(logs: list[Path]) -> int:
    """Lines nsqd logged at ERROR or FATAL, or of a traceback, in these logs (printed, for the report)."""
    found = [line for log in logs if log.exists() for line in log.read_text(errors="replace").splitlines()
             if ("ERROR" in line or "FATAL" in line or "Traceback" in line) and PROBE not in line]
    for line in found[:10]:
        print("  nsqd:", line)
    return len(found)


def _account(name: str, acknowledged: list[bytes], main: Ledger, back: Counter[bytes], dead: Counter[bytes],
             logs: list[Path], extra: str = "") -> list[bytes]:
    """Print the counts; return the acknowledged bodies neither FINed, drained nor dead-lettered."""
    finished = main.finished()
    missing = [body for body in acknowledged if body not in finished and body not in back and body not in dead]
    duplicates = {
        "FINed twice": sum(1 for body in finished if main.fins[body] - main.refused[body] > 1),
        "drained after a FIN": sum(1 for body in back if body in finished),
        "drained twice": sum(1 for count in back.values() if count > 1),
        "dead-lettered twice": sum(1 for count in dead.values() if count > 1),
        "dead-lettered and FINed or drained": sum(1 for body in dead if body in finished or body in back),
    }
    print(f"\n{name}: acknowledged {len(acknowledged)} ({len(set(acknowledged))} distinct; by publish: "
          f"{dict(Counter(_kind(body) for body in acknowledged))}); deliveries on c {main.deliveries}, FINs refused "
          f"{main.refused.total()}; FINed {len(finished)}, drained at the end {len(back)}, dead-lettered {len(dead)} "
          f"({dead.total()} copies){extra}")
    print(f"{name}: duplicates {duplicates}; missing {len(missing)} {dict(Counter(_kind(b) for b in missing))}; "
          f"nsqd error lines {_errors(logs)}")
    return missing


def test_kill_9_with_dead_letters_ttl_and_deferred_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "d"
    acknowledged: list[bytes] = []
    main, ttl = Ledger(), Ledger()
    expired = 0
    procs: list[NsqdProcess] = []
    try:
        for kill in range(KILLS):
            proc = NsqdProcess(data, *SOAK_FLAGS, *CONTROLS).start()
            procs.append(proc)
            if kill == 0:
                _create(proc, ttl_channel=True)
            ttl_consumer = TtlConsumer(proc, ttl)
            load = ControlsLoad(proc, f"k{kill}", acknowledged, main)
            _load_until_dead_letters(proc, acknowledged, kill)
            _alive(proc)
            # what expired in this lifetime: read once nothing more can (only a delivery expires a message)
            ttl_consumer.stop()
            wait_until(lambda proc=proc: channel_stats(proc, TOPIC, TTL_CHANNEL)["client_count"] == 0, timeout=30,
                       what="the TTL channel's consumer to go")
            expired += channel_stats(proc, TOPIC, TTL_CHANNEL)["expired_count"]
            proc.stop(sig=signal.SIGKILL)
            load.stop()

        proc = NsqdProcess(data, *SOAK_FLAGS, *CONTROLS).start()
        procs.append(proc)
        back, dead = _drain_all(proc)
        # the TTL channel: what it still defers comes due (and expires at delivery, or is delivered), then drain it
        wait_until(lambda: channel_stats(proc, TOPIC, TTL_CHANNEL)["deferred_count"] == 0, timeout=60,
                   interval=0.1, what="the TTL channel's deferred messages to come due")
        ttl_back = Counter(m.body for m in drain(proc.tcp_port, TOPIC, TTL_CHANNEL, idle=2.0, limit=120,
                                                 output_buffer_timeout=50))
        expired += channel_stats(proc, TOPIC, TTL_CHANNEL)["expired_count"]
        _alive(proc)

        missing = _account("kill -9", acknowledged, main, back, dead, [p.log_path for p in procs])
        ttl_done = ttl.finished() | set(ttl_back)
        ttl_missing = [body for body in acknowledged if body not in ttl_done]
        print(f"kill -9, TTL channel: FINed {len(ttl.finished())}, drained at the end {len(ttl_back)}, expired "
              f"{expired} (every lifetime), neither FINed nor drained {len(ttl_missing)}")
        assert not missing, f"lost {len(missing)} of {len(acknowledged)} acknowledged on c, e.g. {missing[:5]}"
        assert len(ttl_missing) <= expired, (f"TTL channel: {len(ttl_missing)} acknowledged neither FINed, drained "
                                             f"nor expired ({expired} expired), e.g. {ttl_missing[:5]}")
    finally:
        for proc in procs:
            proc.stop(sig=signal.SIGKILL)


class ControlsOnMount(NsqdOnMount):
    """nsqd on the power-loss mount at the durable settings, with the controls on."""

    def __init__(self, log_dir: Path, data: Path) -> None:
        super().__init__(log_dir, data)
        self.flags.extend(CONTROLS)


@pytest.mark.skipif(not Path("/dev/fuse").exists() or os.geteuid() != 0, reason="needs /dev/fuse and root to mount")
def test_power_loss_with_dead_letters_and_deferred_loses_nothing_acknowledged(fuse_mount: PowerLossMount,
                                                                              tmp_path: Path) -> None:
    data = fuse_mount.mountpoint / "data"
    data.mkdir()
    acknowledged: list[bytes] = []
    main = Ledger()
    for round_no in itertools.count():
        if round_no >= POWER_LOSSES and sum(fuse_mount.dropped()) > 0:
            break
        # a crash that found every write synced tested nothing: one more round then, a few at most
        assert round_no < POWER_LOSSES + 4, "no unsynced write was ever dropped: the crashes tested nothing"
        nsqd = ControlsOnMount(tmp_path / f"log{round_no}", data).start()
        if round_no == 0:
            _create(nsqd, ttl_channel=False)
        load = ControlsLoad(nsqd, f"p{round_no}", acknowledged, main)
        try:
            _load_until_dead_letters(nsqd, acknowledged, round_no)
            _alive(nsqd)
        finally:
            nsqd.stop(sig=signal.SIGKILL)  # the machine dies under load: the process first, then the disk's cache
            load.stop()
        fuse_mount.power_loss()
        fuse_mount.mount()
    nsqd = ControlsOnMount(tmp_path / "final", data).start()
    try:
        back, dead = _drain_all(nsqd)
        _alive(nsqd)
    finally:
        nsqd.stop()
    dropped = fuse_mount.dropped()
    logs = sorted(tmp_path.glob("log*/nsqd-*.log")) + sorted(tmp_path.glob("final/nsqd-*.log"))
    missing = _account("power loss", acknowledged, main, back, dead, logs, extra=f", unsynced bytes dropped {dropped}")
    assert not missing, f"lost {len(missing)} of {len(acknowledged)} acknowledged, e.g. {missing[:5]}"
