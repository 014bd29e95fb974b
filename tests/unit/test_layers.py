"""Layer edges: the broker core knows neither its front doors nor the cluster (issue 15)."""

from __future__ import annotations

import ast
from pathlib import Path

import nsqd_py

PACKAGE = Path(nsqd_py.__file__).parent
FORBIDDEN_FOR_CORE = ("nsqd_py.tcp", "nsqd_py.http", "nsqd_py.cluster", "nsqd_py.context", "nsqd_py.program")


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


def test_core_imports_no_front_door_or_cluster() -> None:
    leaks = {
        f"{path.name}: {module}"
        for path in sorted((PACKAGE / "core").glob("*.py"))
        for module in imported_modules(path)
        if module.startswith(FORBIDDEN_FOR_CORE)
    }
    assert not leaks


def test_import_walk_sees_relative_imports() -> None:
    """Guards the test above against passing because it reads nothing."""
    assert "nsqd_py.core.topic" in imported_modules(PACKAGE / "core" / "nsqd.py")
    assert "nsqd_py.context" in imported_modules(PACKAGE / "program.py")
