"""Every queue control on one channel at once, under load, with consumers that FIN, REQ with a delay and time out
(issue 45's acceptance): at every instant each message the channel took is in exactly one place or end."""

from __future__ import annotations

import struct
import threading
import time

import pytest

from tests.support import FRAME_MESSAGE, NsqdProcess, RawConn, channel_stats, unique, wait_until

pytestmark = pytest.mark.process
#: the bodies are 1-4 bytes: 40 messages of them pass 100 bytes, so either limit may act
CONTROLS = ("--max-channel-depth=40", "--max-channel-bytes=100", "--msg-ttl=2500ms", "--max-attempts=3",
            "--persist-deferred")


def _consume(conn: RawConn, action: str, stop: threading.Event) -> None:
    """FIN, REQ or ignore (let it time out) every message, until ``stop``; the connection stays open after."""
    conn.sock.settimeout(0.2)
    while not stop.is_set():
        try:
            ftype, data = conn.frame()
        except TimeoutError:
            continue
        if ftype != FRAME_MESSAGE:
            continue
        msg_id = data[10:26].decode()
        if action == "fin":
            conn.send(f"FIN {msg_id}")
        elif action == "req":
            conn.send(f"REQ {msg_id} 200")  # deferred, through the deferred store


def _accounted(row: dict) -> int:
    finished = sum(c["finish_count"] for c in row["clients"])
    return (finished + row["dropped_count"] + row["expired_count"] + row["dead_letter_count"] + row["depth"]
            + row["in_flight_count"] + row["deferred_count"])


def test_every_message_is_somewhere(nsqd_factory) -> None:
    nsqd: NsqdProcess = nsqd_factory(*CONTROLS)
    topic = unique("allcontrols")
    nsqd.request("POST", f"/topic/create?topic={topic}")
    nsqd.request("POST", f"/channel/create?topic={topic}&channel=c")
    stop = threading.Event()
    conns, threads = [], []
    for action in ("fin", "req", "ignore"):
        conn = nsqd.connect()
        conn.identify(msg_timeout=1000)
        conn.sub(topic, "c")
        conn.send("RDY 20")
        conns.append(conn)
        threads.append(threading.Thread(target=_consume, args=(conn, action, stop), daemon=True))
    for thread in threads:
        thread.start()
    published = 0
    deadline = time.monotonic() + 4
    snapshots = []
    while time.monotonic() < deadline:
        bodies = [f"{published + i}".encode() for i in range(50)]
        payload = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
        assert nsqd.request("POST", f"/mpub?topic={topic}&binary=true", struct.pack(">i", 50) + payload).status == 200
        published += 50
        if published % 500 == 0:
            snapshots.append(channel_stats(nsqd, topic, "c"))
        time.sleep(0.005)
    time.sleep(3)  # past the TTL: the waiting ones expire, the ignored ones time out and come round
    snapshots.append(channel_stats(nsqd, topic, "c"))
    stop.set()
    for thread in threads:
        thread.join(timeout=5)
    for row in snapshots:
        assert _accounted(row) == row["message_count"], row
    last = snapshots[-1]
    assert last["message_count"] == published
    assert last["dropped_count"] > 0 and last["dead_letter_count"] > 0  # in flight can fill the limit: drops
    assert sum(c["finish_count"] for c in last["clients"]) > 0
    assert last["depth"] + last["in_flight_count"] + last["deferred_count"] <= 40
    dead = f"{topic}.dead"
    wait_until(lambda: [t["message_count"] for t in nsqd.stats()["topics"] if t["topic_name"] == dead]
               == [channel_stats(nsqd, topic, "c")["dead_letter_count"]], timeout=10)
    for conn in conns:
        conn.close()
    assert nsqd.request("GET", "/ping").body == b"OK"
