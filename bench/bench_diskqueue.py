#!/usr/bin/env python3
"""Micro-benchmark of nsqd_py's DiskQueue: put, then read+ack, N records of a fixed size.

Runs once per --sync-every value (default 2500, nsqd's default, and 1, where every put waits for its fsync) and
prints records/s and MB/s for each phase. The loops yield to the gevent hub every --yield-every records, as a
server does on network I/O, so background syncs run while records keep flowing. With --publishers > 1 that many
greenlets put concurrently, which is where sync_every=1 shares one fsync among many publishers. Use --dir to
measure a real disk: /tmp is often tmpfs, where fsync costs nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import gevent

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nsqd_py.core.disk.queue import DiskQueue
from nsqd_py.runtime.log import WARN, Logger


def publish(q: DiskQueue, record: bytes, count: int, yield_every: int) -> None:
    for i in range(count):
        q.put(record)
        if i % yield_every == 0:
            gevent.sleep(0)


def run(directory: str, count: int, size: int, sync_every: int, max_bytes: int, yield_every: int,
        publishers: int) -> None:
    record = os.urandom(size)
    count -= count % publishers
    mb = count * size / 1e6
    with tempfile.TemporaryDirectory(dir=directory) as path:
        q = DiskQueue("bench", path, max_bytes, 26, 26 + 1024 * 1024, sync_every, 2 * 10**9, Logger(level=WARN))
        start = time.perf_counter()
        gevent.joinall([gevent.spawn(publish, q, record, count // publishers, yield_every)
                        for _ in range(publishers)], raise_error=True)
        q.sync()
        put_s = time.perf_counter() - start
        start = time.perf_counter()
        read = 0
        while (item := q.read_one()) is not None:
            q.ack(item[1])
            read += 1
            if read % yield_every == 0:
                gevent.sleep(0)
        q.sync()
        read_s = time.perf_counter() - start
        q.close()
    assert read == count, (read, count)
    for phase, seconds in (("put", put_s), ("read+ack", read_s)):
        print(f"sync_every={sync_every:<5} n={count:<7} publishers={publishers:<3} {phase + ':':<9} "
              f"{count / seconds:>10,.0f} records/s {mb / seconds:>8.1f} MB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="where to create the queue (default: the system temp dir)")
    parser.add_argument("--count", type=int, default=200_000, help="records per run with sync_every > 1")
    parser.add_argument("--count-fsync", type=int, default=2_000, help="records per run with sync_every=1")
    parser.add_argument("--size", type=int, default=200, help="bytes per record")
    parser.add_argument("--max-bytes-per-file", type=int, default=100 * 1024 * 1024)
    parser.add_argument("--sync-every", type=int, nargs="+", default=[2500, 1])
    parser.add_argument("--yield-every", type=int, default=100, help="records between yields to the hub")
    parser.add_argument("--publishers", type=int, default=1, help="greenlets putting concurrently")
    args = parser.parse_args()
    for sync_every in args.sync_every:
        count = args.count if sync_every > 1 else args.count_fsync
        run(args.dir or tempfile.gettempdir(), count, args.size, sync_every, args.max_bytes_per_file,
            args.yield_every, args.publishers)


if __name__ == "__main__":
    main()
