"""Layer edges between the package's parts (issues 15 and 24): the table below, checked on every file."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

import nsqd_py

PACKAGE = Path(nsqd_py.__file__).parent
APPS = PACKAGE.parent / "apps"  # installed as nsqd_py.apps

_FRONT = ("nsqd_py.tcp", "nsqd_py.http", "nsqd_py.cluster", "nsqd_py.lookupd", "nsqd_py.daemon.context",
          "nsqd_py.daemon.program", "nsqd_py.daemon.service", "nsqd_py.daemon.gunicorn_support")
_SERVER = ("nsqd_py.core", *_FRONT)
_CLIENT_SIDE = ("nsqd_py.client", "nsqd_py.tools", "nsqd_py.spark", "nsqd_py.testing", "nsqd_py.pytest_plugin")
_EXECUTABLES = ("nsqd_py.apps",)
_ABOVE_HELPERS = (*_SERVER, "nsqd_py.daemon", "nsqd_py.wire", *_CLIENT_SIDE, *_EXECUTABLES)

#: what each part of the package may not import. go/ and runtime/ are helpers under everything; core is the broker
#: (no front door, cluster, daemon assembly or client; it reads daemon/options); wire is what client and server both
#: speak (it imports nothing of ours); the client side (the blocking client, the tools, Spark, the test helpers
#: users get) never imports the server; no library module imports an executable.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "go": (*_ABOVE_HELPERS, "nsqd_py.runtime"),
    "runtime": _ABOVE_HELPERS,
    "wire": ("nsqd_py.",),
    "core": ("nsqd_py.tcp", "nsqd_py.http", "nsqd_py.cluster", "nsqd_py.lookupd", "nsqd_py.daemon.context",
             "nsqd_py.daemon.program", "nsqd_py.daemon.service", "nsqd_py.daemon.gunicorn_support", *_CLIENT_SIDE,
             *_EXECUTABLES),
    "tcp": ("nsqd_py.http", "nsqd_py.lookupd", "nsqd_py.daemon.program", *_CLIENT_SIDE, *_EXECUTABLES),
    "http": ("nsqd_py.lookupd", "nsqd_py.daemon.program", *_CLIENT_SIDE, *_EXECUTABLES),
    "cluster": ("nsqd_py.tcp", "nsqd_py.http", "nsqd_py.lookupd", "nsqd_py.daemon.program", *_CLIENT_SIDE,
                *_EXECUTABLES),
    "lookupd": ("nsqd_py.cluster", "nsqd_py.daemon.context", "nsqd_py.daemon.program", *_CLIENT_SIDE, *_EXECUTABLES),
    "daemon": (*_CLIENT_SIDE, *_EXECUTABLES),
    "client": (*_SERVER, "nsqd_py.daemon", "nsqd_py.tools", "nsqd_py.spark", "nsqd_py.testing", *_EXECUTABLES),
    "tools": (*_SERVER, "nsqd_py.daemon", "nsqd_py.spark", "nsqd_py.testing", *_EXECUTABLES),
    "spark": (*_SERVER, "nsqd_py.daemon", "nsqd_py.tools", "nsqd_py.testing", *_EXECUTABLES),
    "top level": (*_FRONT, "nsqd_py.daemon", *_EXECUTABLES),  # __init__ asks core whether it is compiled
}


def _files(part: str) -> list[Path]:
    if part == "top level":
        return sorted(PACKAGE.glob("*.py"))
    return sorted((PACKAGE / part).rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it (TYPE_CHECKING blocks and functions too), made absolute."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("part", FORBIDDEN)
def test_layer_edges(part: str) -> None:
    leaks = {
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in _files(part)
        for module in imported_modules(path)
        if module.startswith(FORBIDDEN[part])
    }
    assert not leaks


def test_every_package_has_its_rules() -> None:
    """A new package must say what it may not import."""
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert packages <= set(FORBIDDEN), packages - set(FORBIDDEN)


def test_testing_helpers_use_the_client_only() -> None:
    for name in ("testing.py", "pytest_plugin.py"):
        leaks = {m for m in imported_modules(PACKAGE / name) if m.startswith((*_SERVER, *_EXECUTABLES))}
        assert not leaks, name


def test_import_walk_sees_relative_imports() -> None:
    """Guards the test above against passing because it reads nothing."""
    assert "nsqd_py.core.topic" in imported_modules(PACKAGE / "core" / "nsqd.py")
    assert "nsqd_py.daemon.context" in imported_modules(PACKAGE / "daemon" / "program.py")


def test_unit_tests_start_no_process() -> None:
    """tests/unit is the fast, process-free suite: nothing in it imports what starts a process."""
    starters = ("subprocess", "multiprocessing", "tests.support.NsqdProcess", "nsqd_py.testing", "pyspark")
    unit = Path(__file__).resolve().parent
    leaks = {
        f"{path.name}: {module}"
        for path in sorted(unit.glob("*.py"))
        for module in imported_modules(path)
        if module.startswith(starters)
    }
    assert not leaks


def test_pytest_collects_every_test_directory(pytestconfig: pytest.Config) -> None:
    """A directory pytest does not recurse into (its default norecursedirs has `dist` and `build`) would hold tests
    that never run, silently, as tests/dist did."""
    tests = Path(__file__).resolve().parents[1]
    patterns = pytestconfig.getini("norecursedirs")
    skipped = sorted(str(path.relative_to(tests)) for path in tests.rglob("*")
                     if path.is_dir() and path.name != "__pycache__"
                     and any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns))
    assert skipped == []
