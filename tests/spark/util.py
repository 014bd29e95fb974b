"""Helpers for the Spark tests: publish over nsqd's HTTP API, read a channel's counters."""

from __future__ import annotations

import requests

from nsqd_py.client.connection import Connection
from nsqd_py.client.protocol import Message, mpub_body
from nsqd_py.spark.slice_task import SliceAssignment
from nsqd_py.spark.slices import SliceStore
from tests.support import NsqdProcess, channel_stats, wait_until


def publish(nsqd: NsqdProcess, topic: str, bodies: list[bytes]) -> None:
    """MPUB over HTTP in chunks (binary mode: bodies may hold newlines)."""
    for i in range(0, len(bodies), 1000):
        chunk = bodies[i:i + 1000]
        resp = requests.post(f"{nsqd.http_url}/mpub", params={"topic": topic, "binary": "true"}, data=mpub_body(chunk),
                             timeout=10)
        resp.raise_for_status()


def http_address(nsqd: NsqdProcess) -> str:
    return f"127.0.0.1:{nsqd.http_port}"


def source_options(nsqd: NsqdProcess, topic: str, **extra: str) -> dict[str, str]:
    """The source's options for reading ``topic`` on channel ``c`` of ``nsqd`` (``extra`` adds or replaces)."""
    return {"subscribe": topic, "channel": "c", "nsqdTcpAddresses": nsqd.tcp_address,
            "nsqdHttpAddresses": http_address(nsqd), "pollTimeout": "300ms", **extra}


def bodies(count: int, prefix: str = "m", size: int = 0) -> list[bytes]:
    """``count`` distinct bodies, padded to ``size`` bytes."""
    return [f"{prefix}-{i}".encode().ljust(size, b"x") for i in range(count)]


def topic_depth(nsqd: NsqdProcess, topic: str) -> int:
    [found] = nsqd.stats(topic=topic)["topics"]
    return found["depth"]


def drained(nsqd: NsqdProcess, topic: str, channel: str) -> bool:
    stats = channel_stats(nsqd, topic, channel)
    return stats["depth"] == 0 and stats["in_flight_count"] == 0 and stats["deferred_count"] == 0


def planned(task: SliceAssignment) -> SliceAssignment:
    """Record ``task``'s batch in its write-ahead location as the driver does when it plans a batch."""
    SliceStore(task.location, task.query).plan(task.batch, [task.spec.name])
    return task


def hold_in_flight(nsqd: NsqdProcess, topic: str, count: int) -> tuple[Connection, list[Message]]:
    """Another consumer of the channel takes ``count`` messages and keeps them in flight."""
    conn = Connection(nsqd.tcp_address).connect()
    conn.identify()
    conn.sub(topic, "c")
    conn.rdy(count)
    taken = [conn.read_frame(5) for _ in range(count)]
    assert all(isinstance(m, Message) for m in taken)
    conn.rdy(0)
    wait_until(lambda: channel_stats(nsqd, topic, "c")["in_flight_count"] == count)
    return conn, taken  # type: ignore[return-value]
