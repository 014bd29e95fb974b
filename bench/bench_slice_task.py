#!/usr/bin/env python3
"""Messages/s through one executor task of the "nsq" source (`SliceTask.run()`), without Spark.

Starts the venv's nsqd on free loopback ports, publishes --messages bodies of --size bytes to a fresh topic per run,
and times one task reading them all (its chunks published to a temporary write-ahead location, fsynced) in two modes,
alternating, --rounds times each:

* ``prefetch`` (what the source does): when a chunk is published and FINed, the task asks nsqd for the next chunk
  (RDY) before yielding the rows, so nsqd sends it while the rows go downstream; a background thread TOUCHes what
  the task holds, so a slow downstream stage cannot make it time out;
* ``no-prefetch``: RDY 0 before yielding, and RDY again only when the next chunk is wanted.

--work-ms sleeps that long per chunk while iterating the rows, as a downstream stage would take.

    .venv/bin/python bench/bench_slice_task.py --messages 200000 --size 200 --rounds 2
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nsqd_py.client import Producer
from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.slice_task import SliceAssignment, SliceTask, Subscription
from nsqd_py.spark.slices import SliceSpec, SliceStore
from nsqd_py.testing import NsqdServer

MODES = ("prefetch", "no-prefetch")


@contextmanager
def no_prefetch() -> Iterator[None]:
    """RDY 0 when a chunk is settled: nothing is delivered while the rows go downstream."""
    settle = Subscription.settle

    def settle_without_prefetch(self: Subscription, finished: list, next_limit: int) -> None:
        settle(self, finished, 0)

    Subscription.settle = settle_without_prefetch  # type: ignore[method-assign]
    try:
        yield
    finally:
        Subscription.settle = settle  # type: ignore[method-assign]


def publish(tcp: str, topic: str, count: int, size: int) -> None:
    body = b"x" * size
    with Producer(tcp) as producer:
        for start in range(0, count, 1000):
            producer.mpub(topic, [body] * min(1000, count - start))


def read_all(nsqd: NsqdServer, location: Path, count: int, size: int, work: float) -> tuple[int, float]:
    """One task over a fresh topic of ``count`` messages: (rows read, seconds); ``work`` seconds per full chunk."""
    topic = f"bench_{uuid.uuid4().hex[:8]}"
    publish(nsqd.tcp_address, topic, count, size)
    opts = ReadOptions.parse({"subscribe": topic, "channel": "c", "nsqdTcpAddresses": nsqd.tcp_address,
                              "pollTimeout": "300ms"})
    store = SliceStore(str(location), topic)
    spec = SliceSpec(topic, nsqd.tcp_address, 0, count)
    store.plan(1, [spec.name])
    task = SliceTask(SliceAssignment(str(location), topic, 1, "c", spec), opts, None)
    rows = 0
    started = time.perf_counter()
    for batch in task.run():
        rows += batch.num_rows
        if work:
            time.sleep(work * batch.num_rows / task.subscription.max_rdy)
    elapsed = time.perf_counter() - started
    return rows, elapsed


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, NsqdServer(data_dir=Path(tmp) / "nsqd") as nsqd:
        results: dict[str, list[float]] = {mode: [] for mode in MODES}
        for round_number in range(args.rounds):
            for mode in MODES:
                with no_prefetch() if mode == "no-prefetch" else contextlib.nullcontext():
                    rows, elapsed = read_all(nsqd, Path(tmp) / "wal", args.messages, args.size, args.work_ms / 1000)
                assert rows == args.messages, (mode, rows)
                results[mode].append(rows / elapsed)
                print(f"round {round_number + 1} {mode:12s} {rows / elapsed:10.0f} msgs/s ({elapsed:.2f} s)")
        for mode, rates in results.items():
            print(f"{mode:12s} best {max(rates):10.0f} msgs/s, median {sorted(rates)[len(rates) // 2]:10.0f}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work-ms", type=float, default=0.0, help="downstream time per full chunk of rows")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse_args())
