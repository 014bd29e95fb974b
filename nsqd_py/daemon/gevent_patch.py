"""gevent's monkey.patch_all for the executables, with one scan of the installed packages' entry points.

patch_all looks up gevent's plugin hooks (entry points `gevent.plugins.monkey.*`) once per event, 25 times,
and each lookup reads the metadata of every installed distribution: 60-100 ms of nsqd's start-up. Here the
lookups share one scan; the same plugins run, in the same order (nothing is installed meanwhile).
"""

from __future__ import annotations

from importlib import metadata
from typing import Any


def patch_all() -> None:
    from gevent import monkey

    scanned = metadata.entry_points()
    lookup = metadata.entry_points

    def entry_points(**params: Any) -> metadata.EntryPoints | metadata.SelectableGroups:
        return scanned.select(**params) if params else scanned

    metadata.entry_points = entry_points  # type: ignore[assignment]
    try:
        monkey.patch_all()
    finally:
        metadata.entry_points = lookup
