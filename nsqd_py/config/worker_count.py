"""How many I/O worker processes serve TCP clients (issue 37): NSQD_PY_IO_WORKERS, an environment variable while the
mode is experimental, so nsqd's flags and TOML keys stay exactly Go's."""

from __future__ import annotations

import os
from collections.abc import Mapping

IO_WORKERS_ENV = "NSQD_PY_IO_WORKERS"


def io_worker_count(environ: Mapping[str, str] = os.environ) -> int:
    """The number of I/O workers asked for (0: connections are served in the broker's process); ValueError."""
    text = environ.get(IO_WORKERS_ENV, "").strip() or "0"
    count = int(text)
    if count < 0:
        raise ValueError(f"{IO_WORKERS_ENV} must be 0 or more, not {text}")
    return count
