"""gevent's monkey.patch_all for the executables, with its plugin lookup made cheap.

patch_all announces each step to gevent's plugins: entry points in the groups `gevent.plugins.monkey.*` of the
installed distributions (gevent registers one itself). gevent finds them with importlib.metadata, once per event
(25 times), and importing importlib.metadata alone costs ~20 ms of nsqd's start-up (its email and zipfile
imports). Here the installed distributions' `entry_points.txt` files are read once, as importlib.metadata would
find them on sys.path (the first distribution of a name wins), and the same plugins are called in the same order.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

_PLUGIN_GROUPS = "gevent.plugins."


def patch_all() -> None:
    from gevent import events, monkey

    plugins = gevent_plugins()

    def notify_and_call_plugins(event: Any) -> None:
        events.notify(event)
        for target in plugins.get(event.ENTRY_POINT_NAME, ()):
            load_entry_point(target)(event)

    lookup = events.notify_and_call_entry_points
    events.notify_and_call_entry_points = notify_and_call_plugins
    try:
        monkey.patch_all()
    finally:
        events.notify_and_call_entry_points = lookup


def gevent_plugins(path: list[str] | None = None) -> dict[str, list[str]]:
    """Entry point group → the `module:attribute` targets of gevent's plugin groups, over the distributions on
    ``path`` (default sys.path)."""
    found: dict[str, list[str]] = {}
    seen: set[str] = set()
    for entry in sys.path if path is None else path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:  # not a directory (a zip file, say) or gone
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            distribution = re.sub(r"[-_.]+", "_", name.rpartition(".")[0].partition("-")[0]).lower()
            if distribution in seen:
                continue
            seen.add(distribution)
            for group, targets in _plugin_entry_points(os.path.join(entry or ".", name, "entry_points.txt")):
                found.setdefault(group, []).extend(targets)
    return found


def _plugin_entry_points(path: str) -> list[tuple[str, list[str]]]:
    """The gevent plugin groups of one `entry_points.txt` (an INI file: `[group]`, then `name = target` lines)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return []
    groups: dict[str, list[str]] = {}
    group = ""
    for raw in text.splitlines() if _PLUGIN_GROUPS in text else ():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
        elif group.startswith(_PLUGIN_GROUPS) and "=" in line and line[0] not in "#;":
            groups.setdefault(group, []).append(line.partition("=")[2].strip())
    return list(groups.items())


def load_entry_point(target: str) -> Any:
    """`module:attr.attr` (an entry point's value; extras in brackets are ignored) to the object it names."""
    module, _, attrs = target.partition("[")[0].strip().partition(":")
    obj: Any = importlib.import_module(module.strip())
    for attr in filter(None, attrs.strip().split(".")):
        obj = getattr(obj, attr)
    return obj
