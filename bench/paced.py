"""Publish -> deliver latency under a paced offer, from ``paced_load.c`` (built here with the machine's C compiler).

The load is in C because the latency rows measure a server's tail at a fixed offer: a Python generator on the same
2 cores spent more CPU than the server it measured and held both servers to the same offer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_SOURCE = Path(__file__).resolve().parent / "paced_load.c"


@dataclass(frozen=True)
class Latency:
    received: int
    published_rate: float  # what the producers reached (each waits for its OK, so a slow server holds it back)
    p50: float  # microseconds from nsqd's timestamp in the message to its receipt, after a tenth for warm-up
    p99: float
    p999: float
    max: float

    def summary(self) -> str:
        return (f"(us: p50 {self.p50:.0f}, p99 {self.p99:.0f}, p99.9 {self.p999:.0f}, max {self.max:.0f}, "
                f"published at {self.published_rate:.0f}/s)")


@cache
def _binary() -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("the latency rows need a C compiler (cc) to build bench/paced_load.c")
    binary = Path(tempfile.mkdtemp(prefix="paced_load-")) / "paced_load"
    subprocess.run([compiler, "-O2", "-pthread", "-o", str(binary), str(_SOURCE)], check=True)
    return binary


def publish_to_deliver(port: int, rate: float, consumers: int, seconds: float, producers: int = 1,
                       topic: str = "latency", channel: str = "ch") -> Latency:
    """``rate`` single PUBs a second for ``seconds`` from ``producers`` connections (each sends its next PUB once its
    OK arrived and the next message is due) to ``consumers`` at RDY 1 that FIN what they get."""
    count = max(1, int(rate * seconds))
    out = subprocess.run([str(_binary()), str(port), str(rate), str(producers), str(consumers), str(count), topic,
                          channel], capture_output=True, text=True, check=True, timeout=seconds + 660)
    return Latency(**json.loads(out.stdout))
