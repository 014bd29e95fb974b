"""The broker's own share of an operation: the core (topics, channels, queues, in-flight) with no sockets.

    .venv/bin/python bench/bench_broker.py

In one process, on the installed build (compiled where it is), with one topic and one channel in memory:
- ``publish 1``: ``Topic.publish`` of one message, as a PUB does, the topic pump moving it to the channel;
- ``publish 200``: the same with batches of 200, as an MPUB does (per message);
- ``deliver + FIN``: a ready consumer is sent each message and finishes it (per message).
What is left of a server's CPU per operation once these are taken away is the connection's work (syscalls,
parsing, framing, the loop): the part an I/O-worker process would take off the broker (docs/benchmarks.md's
model for more cores).
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time

import gevent

from nsqd_py.config.options import Options
from nsqd_py.core.channel import Channel
from nsqd_py.core.consumer import STATE_SUBSCRIBED, Consumer
from nsqd_py.core.message import Message
from nsqd_py.core.nsqd import NSQD
from nsqd_py.runtime.log import Logger

BODY = b"x" * 200


class FinishingConsumer(Consumer):
    """Ready for everything; FINs each message as soon as it is sent (the delivery and the FIN, no socket)."""

    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self.state = STATE_SUBSCRIBED
        self.ready_count = 1 << 30
        self.channel = channel
        self.received = 0

    def send_message(self, msg: Message) -> None:
        self.received += 1
        self.channel.finish(self, msg.id, dispatch=False)

    def close(self) -> None:
        pass


def _broker() -> NSQD:
    opts = Options(data_path=tempfile.mkdtemp(prefix="nsqd-broker-"), mem_queue_size=10_000_000)
    return NSQD(opts, Logger(stream=io.StringIO()))


def _cpu_us_per(count: int, run: object) -> float:
    start = time.process_time()
    run()  # type: ignore[operator]
    return (time.process_time() - start) / count * 1e6


def publish(batch: int, total: int) -> float:
    topic = _broker().get_topic("t")
    topic.get_channel("c")
    bodies = [BODY] * batch

    def run() -> None:
        for _ in range(total // batch):
            topic.publish(bodies)
        gevent.sleep(0)  # the pump moves what is left into the channel

    return _cpu_us_per(total // batch * batch, run)


def deliver(total: int) -> float:
    topic = _broker().get_topic("t")
    channel = topic.get_channel("c")
    for _ in range(total // 200):
        topic.publish([BODY] * 200)
    gevent.sleep(0)
    consumer = FinishingConsumer(channel)

    def run() -> None:
        channel.add_client(consumer)
        while consumer.received < total:
            channel.dispatch()
            gevent.sleep(0)

    return _cpu_us_per(total, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = {"publish 1": lambda: publish(1, args.messages), "publish 200": lambda: publish(200, args.messages),
            "deliver + FIN": lambda: deliver(args.messages)}
    print("| broker work | CPU us per message (median, range) |")
    print("|---|---|")
    for name, run in rows.items():
        values = [run() for _ in range(args.rounds)]
        print(f"| {name} | {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) |")


if __name__ == "__main__":
    main()
