"""How far each nsqd's clock is from the driver's, read from the `Date` header of its HTTP answers.

availableNow's cutoff is a moment the driver reads on its own clock, but a task compares it with the publish
timestamps that nsqd put on the messages, on nsqd's clock. An nsqd whose clock runs behind stamps messages published
after the start as older, and one whose clock runs ahead stamps older messages as newer. So each nsqd gets the cutoff
on its own clock: the driver's plus that nsqd's offset.

Go's net/http and this package's server send `Date` on every answer, in whole seconds rounded down. The driver asks
`/ping` until that second changes: nsqd's clock passed the new second between the ask before (sent at driver time
t0) and the answer after (received at t1), so the offset is within [second - t1, second - t0], two round trips and
one pause between asks wide (a few milliseconds nearby). Every answer narrows the span on its own too. It takes up to
a second, for all nsqd at once.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import urllib3

from ..client.errors import HTTPError
from ..client.http import endpoint
from .discovery import parallel
from .nsqd_http import base_url, http_pool, send
from .options import ConnectOptions
from .planner import UnreachableError

log = logging.getLogger(__name__)

_SECOND = 1_000_000_000
#: seconds between two asks while waiting for nsqd's second to change
_ASK_INTERVAL = 0.002
#: the longest the driver asks one nsqd (answers slower than this leave a span of about a second)
_LONGEST = 1.5


@dataclass(frozen=True)
class ClockOffset:
    """nsqd's clock less the driver's, in ns: somewhere from ``low`` to ``high``."""

    low: int
    high: int

    @classmethod
    def of(cls, second: int, sent: int, received: int) -> ClockOffset:
        """From one answer: nsqd's clock read ``second`` (rounded down) between ``sent`` and ``received``, the
        driver's ns since the epoch."""
        return cls(second * _SECOND - received, (second + 1) * _SECOND - sent)

    def narrowed(self, other: ClockOffset) -> ClockOffset:
        """Both spans at once; ``other`` alone when they do not meet (a clock was set meanwhile)."""
        both = ClockOffset(max(self.low, other.low), min(self.high, other.high))
        return both if both.low <= both.high else other


def clock_offsets(http_addresses: dict[str, str], connect: ConnectOptions) -> dict[str, ClockOffset]:
    """The clock offset of each nsqd (its TCP address, to its HTTP address, asked as the survey asks it: over HTTPS
    with the reads' TLS settings where it does, nsqd_http.py), all at once. An nsqd that does not answer raises
    UnreachableError; one whose answers carry no Date is taken as in step, with a warning."""
    timeout = (min(2.0, connect.connect_timeout), connect.connect_timeout)
    stop_at = time.monotonic() + _LONGEST
    calls = {tcp: _measure_call(http, connect, timeout, stop_at) for tcp, http in http_addresses.items()}
    offsets, errors = parallel(calls, stop_at + connect.connect_timeout)
    if errors:
        raise UnreachableError("cannot read the clock of " + "; ".join(
            f"nsqd {tcp} (HTTP {http_addresses[tcp]}): {err}" for tcp, err in sorted(errors.items())))
    return offsets


def _measure_call(http: str, connect: ConnectOptions, timeout: tuple[float, float],
                  stop_at: float) -> Callable[[], ClockOffset]:
    return lambda: measure(http, connect, timeout, stop_at)


def measure(http: str, connect: ConnectOptions, timeout: tuple[float, float], stop_at: float) -> ClockOffset:
    """Ask nsqd's `/ping` until the second in its Date changes, or until ``stop_at`` (time.monotonic())."""
    url = endpoint(base_url(http), "/ping")
    with http_pool(url, connect, timeout) as pool:
        answer = _ask(pool, url)
        if answer is None:
            log.warning("nsqd %s sends no Date header: availableNow takes its clock as the driver's (keep them in "
                        "step with NTP)", http)
            return ClockOffset(0, 0)
        offset, first = ClockOffset.of(*answer), answer[0]
        while time.monotonic() < stop_at:
            time.sleep(_ASK_INTERVAL)
            answer = _ask(pool, url)
            if answer is None:
                raise HTTPError(f"GET {url}: an answer without a Date header")
            offset = offset.narrowed(ClockOffset.of(*answer))
            if answer[0] != first:
                break
    log.debug("nsqd %s: its clock is %.3f to %.3f s ahead of the driver's", http, offset.low / _SECOND,
              offset.high / _SECOND)
    return offset


def _ask(pool: urllib3.PoolManager, url: str) -> tuple[int, int, int] | None:
    """The second of the answer's Date, and the driver's ns when the ask was sent and the answer came; None without
    a Date. Any status does (nsqd answers 403 to plain HTTP when it requires TLS, with a Date all the same)."""
    sent = time.time_ns()
    resp = send(pool, "GET", url)
    received = time.time_ns()
    try:
        second = int(email.utils.parsedate_to_datetime(resp.headers["Date"]).timestamp())
    except (KeyError, TypeError, ValueError):
        return None
    return second, sent, received
