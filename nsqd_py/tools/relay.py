"""What nsq_to_http and nsq_to_nsq share: consume topics, hand messages on, settle them at-least-once.

A message is FINed only after its delivery succeeded; a failed one is REQed with go-nsq's linear delay
(attempts x `default_requeue_delay`, at most `max_requeue_delay`), never dropped. Deliveries run on a pool
of ``workers`` threads (Go's concurrent handlers); FIN/REQ happen on the consuming thread. SIGINT/SIGTERM send
CLS, wait for what is in flight to settle, then exit.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from ..client import Consumer, Message
from .common import ClientSettings, gonsq_log, log_fatal, log_printf, user_agent

#: how long a stopping tool waits for in-flight deliveries to settle
STOP_TIMEOUT = 30.0


class HostPool:
    """go-hostpool's plain pool: hosts in turn, skipping one that failed until its retry time (30 s, doubling
    to 15 min); when all are down, all are tried again."""

    def __init__(self, hosts: Sequence[str], initial_retry: float = 30.0, max_retry: float = 900.0) -> None:
        self.hosts = list(hosts)
        self._next = 0
        self._retry_at = dict.fromkeys(self.hosts, 0.0)
        self._retry_delay = dict.fromkeys(self.hosts, 0.0)
        self._initial, self._max = initial_retry, max_retry

    def get(self) -> str:
        now = time.monotonic()
        for _ in range(len(self.hosts)):
            host = self.hosts[self._next]
            self._next = (self._next + 1) % len(self.hosts)
            if self._retry_at[host] <= now:
                return host
        for host in self.hosts:  # every host is down: give them all another chance
            self._retry_at[host] = 0.0
        return self.get()

    def mark(self, host: str, ok: bool) -> None:
        if ok:
            self._retry_delay[host] = 0.0
            self._retry_at[host] = 0.0
        else:
            delay = min(self._max, max(self._initial, self._retry_delay[host] * 2))
            self._retry_delay[host] = delay
            self._retry_at[host] = time.monotonic() + delay


class RoundRobin:
    """Each host in turn (`--mode=round-robin`)."""

    def __init__(self, hosts: Sequence[str]) -> None:
        self.hosts = list(hosts)
        self._next = 0

    def get(self) -> str:
        host = self.hosts[self._next]
        self._next = (self._next + 1) % len(self.hosts)
        return host

    def mark(self, host: str, ok: bool) -> None:
        """Round-robin ignores outcomes."""


#: `--mode` of nsq_to_http and nsq_to_nsq (epsilon-greedy is taken as hostpool)
MODES = ("round-robin", "hostpool", "epsilon-greedy")
MODE_USAGE = "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy"


def check_mode(mode: str) -> None:
    if mode not in MODES:
        log_fatal(f"invalid --mode '{mode}' (round-robin, hostpool, epsilon-greedy)")


def host_selector(mode: str, hosts: Sequence[str]) -> HostPool | RoundRobin:
    return RoundRobin(hosts) if mode == "round-robin" else HostPool(hosts)


class TimerMetrics:
    """bitly/timer_metrics: every ``every`` deliveries, one line with the 99th/95th percentile and mean time."""

    def __init__(self, every: int, prefix: str) -> None:
        self.every = every
        self.prefix = prefix
        self._samples: list[float] = []

    def status(self, started: float) -> None:
        if self.every <= 0:
            return
        self._samples.append(time.monotonic() - started)
        if len(self._samples) >= self.every:
            ordered = sorted(self._samples)
            p99 = ordered[int(len(ordered) * 0.99) - 1] * 1000
            p95 = ordered[int(len(ordered) * 0.95) - 1] * 1000
            avg = sum(ordered) / len(ordered) * 1000
            log_printf(f"{self.prefix} finished {len(ordered)} - 99th: {p99:.02f}ms - 95th: {p95:.02f}ms - "
                       f"avg: {avg:.02f}ms")
            self._samples.clear()


def make_consumers(app: str, topics: Sequence[str], channel: str, nsqd_tcp_addresses: Sequence[str],
                   lookupd_http_addresses: Sequence[str], max_in_flight: int,
                   settings: ClientSettings) -> list[Consumer]:
    return [Consumer(topic, channel, nsqd_tcp_addresses=nsqd_tcp_addresses,
                     lookupd_http_addresses=lookupd_http_addresses,
                     max_in_flight=settings.max_in_flight or max_in_flight, identify=settings.identify,
                     tls_context=settings.tls_context(), timeout=settings.timeout,
                     lookupd_poll_interval=settings.lookupd_poll_interval, user_agent=user_agent(app),
                     log=gonsq_log(i)) for i, topic in enumerate(topics, 1)]


#: delivers messages of one topic; True when they were handed on (or deliberately skipped), False to retry later
Deliver = Callable[[str, list[Message]], bool]


def relay(consumers: list[Consumer], deliver: Deliver, settings: ClientSettings, workers: int,
          sample: float = 1.0, batch: int = 1) -> None:
    """Run until SIGINT/SIGTERM: messages go to ``deliver`` on the pool, up to ``batch`` at a time (all of a
    batch succeed or fail together), then FIN or REQ."""
    stop_requested: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop_requested.append(signum))
    pending: dict[Future[bool], tuple[Consumer, list[Message]]] = {}
    deadline = float("inf")
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        try:
            while time.monotonic() < deadline:
                if stop_requested and deadline == float("inf"):
                    deadline = time.monotonic() + STOP_TIMEOUT
                    for consumer in consumers:
                        consumer.stop()
                if stop_requested and not pending and all(c.drained for c in consumers):
                    return
                wait_each = 0.0 if pending else 0.5 / len(consumers)
                for consumer in consumers:
                    chosen = []
                    for msg in consumer.poll(wait_each):
                        if sample < 1.0 and random.random() > sample:
                            consumer.fin(msg)  # not sampled: done with, as Go's handler returning nil
                        else:
                            chosen.append(msg)
                    for start in range(0, len(chosen), batch):
                        msgs = chosen[start : start + batch]
                        pending[pool.submit(deliver, consumer.topic, msgs)] = (consumer, msgs)
                if pending:
                    done, _ = wait(pending, timeout=0.05, return_when=FIRST_COMPLETED)
                    for future in done:
                        consumer, msgs = pending.pop(future)
                        _settle(consumer, msgs, future, settings)
        finally:
            for consumer in consumers:
                consumer.close()


def _settle(consumer: Consumer, msgs: list[Message], outcome: Future[bool], settings: ClientSettings) -> None:
    try:
        delivered = outcome.result()
    except Exception as err:  # a delivery that raised is a failed one: retried, never lost
        log_printf(f"ERROR: delivering {len(msgs)} message(s) - {err}")
        delivered = False
    for msg in msgs:
        if delivered:
            consumer.fin(msg)
        else:
            delay = min(settings.max_requeue_delay, settings.default_requeue_delay * msg.attempts)
            consumer.req(msg, int(delay * 1000))
