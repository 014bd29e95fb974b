"""gevent's monkey.patch_all for the executables: only the modules nsqd blocks in, and its plugin lookup made cheap.

nsqd and nsqlookupd run on gevent's own API (gevent.sleep, gevent.event, gevent.queue, gevent.signal_handler); what
the standard library does for them blocks in sockets (their listeners and clients, statsd, lookupd, and
requests/urllib3 for auth servers and lookupd queries), in DNS look-ups, in TLS and in time.sleep (third-party
code). Those are patched. Threads, queue, select, os (fork), signal and subprocess are not: nothing nsqd runs waits
on a threading lock, a queue.Queue or a select (requests holds its locks for a few operations with no I/O, and
urllib3 polls with timeout 0), nsqd does not fork and starts processes only through gevent.subprocess (its I/O
workers; under gunicorn, gevent's worker patches everything), and runtime/disk_threads.py uses real OS threads on
purpose. Patching them would cost ~10 ms of every start (bench/bench_startup.py --patch nsqd --patch all).
tests/startup/test_gevent_patch.py proves the four cooperative inside a running nsqd and nsqlookupd, and that nsqd's
own modules import none of the others.

patch_all announces each step to gevent's plugins: entry points in the groups `gevent.plugins.monkey.*` of the
installed distributions (gevent registers one itself). gevent finds them with importlib.metadata, once per event
(25 times), and importing importlib.metadata alone costs ~20 ms of nsqd's start-up (its email and zipfile
imports). Here the installed distributions' `entry_points.txt` files are read once, as importlib.metadata would
find them on sys.path (the first distribution of a name wins), and the same plugins are called in the same order.

ssl is patched when it is first imported (TLS set-up, a TCP client's TLS upgrade, requests), not inside patch_all:
importing it is ~6 ms of every start, and most never use it. A finder placed first on sys.meta_path patches it
then, before any module holds a reference to it, as gevent asks.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from collections.abc import Collection, Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

_PLUGIN_GROUPS = "gevent.plugins."

#: the modules gevent.monkey.patch_all patches by default (its keyword arguments)
EVERYTHING = ("os", "thread", "time", "socket", "dns", "select", "ssl", "subprocess", "signal", "queue", "contextvars")

#: the modules nsqd and nsqlookupd block in (see above)
NSQD_MODULES = ("time", "socket", "dns", "ssl")


def patch_all(modules: Collection[str] = NSQD_MODULES) -> None:
    """gevent.monkey.patch_all for ``modules`` (of EVERYTHING) only."""
    unknown = set(modules).difference(EVERYTHING)
    if unknown:
        raise ValueError(f"gevent.monkey.patch_all has no switch for {sorted(unknown)}")
    from gevent import monkey

    plugins = gevent_plugins()
    on_import = "ssl" in modules and "ssl" not in sys.modules
    with _plugins(plugins):
        monkey.patch_all(**{name: name in modules and not (on_import and name == "ssl") for name in EVERYTHING})
    if on_import:
        sys.meta_path.insert(0, _PatchSslOnImport(plugins))


@contextlib.contextmanager
def _plugins(plugins: dict[str, list[str]]) -> Iterator[None]:
    """Meanwhile gevent announces its patching events to ``plugins`` (gevent_plugins), not looking them up with
    importlib.metadata."""
    from gevent import events

    def notify_and_call_plugins(event: Any) -> None:
        events.notify(event)
        for target in plugins.get(event.ENTRY_POINT_NAME, ()):
            load_entry_point(target)(event)

    lookup = events.notify_and_call_entry_points
    events.notify_and_call_entry_points = notify_and_call_plugins
    try:
        yield
    finally:
        events.notify_and_call_entry_points = lookup


class _PatchSslOnImport:
    """The first `import ssl` (or of gevent.ssl) runs gevent.monkey.patch_ssl, which imports both, then leaves
    sys.meta_path."""

    def __init__(self, plugins: dict[str, list[str]]) -> None:
        self._plugins = plugins
        self._spec: ModuleSpec | None = None

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in ("ssl", "gevent.ssl"):  # gevent.ssl imports ssl: whichever comes first patches it
            return None
        sys.meta_path.remove(self)
        return ModuleSpec(name, cast("Loader", self))

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        from gevent import monkey

        with _plugins(self._plugins):
            monkey.patch_ssl()  # imports gevent.ssl and ssl (this finder is gone), then patches ssl
        module = sys.modules[spec.name]
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import system set this finder's spec on the module patch_ssl imported


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
