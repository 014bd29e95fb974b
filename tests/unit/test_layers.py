"""Layer edges between the package's parts (issues 15 and 24): the table below, checked on every file."""

from __future__ import annotations

import ast
import configparser
import fnmatch
from pathlib import Path

import pytest

import nsqd_py

PACKAGE = Path(nsqd_py.__file__).parent
APPS = PACKAGE.parent / "apps"  # installed as nsqd_py.apps

#: the server, bottom to top: a part may import the parts before it and none after. go/ and runtime/ are helpers
#: under everything; http_server/ is the HTTP/1.1 transport, which knows nothing of the broker; web/ the response
#: envelope and router every HTTP API here shares (Go's internal/http_api); config/ is the
#: options every layer reads; core/ is the broker; cluster/ its surroundings and the context the front doors share;
#: tcp/ and http_api/ are the front doors (lookupd, beside them, stands on the transport and web/ only); daemon/
#: assembles the process, and nothing but the executables imports it.
SERVER = ("go", "runtime", "wire", "http_server", "web", "config", "core", "cluster", "tcp", "http_api", "lookupd",
          "daemon")
#: the client side (the blocking client, the tools, Spark) stands on the bottom three and never on the server.
CLIENT_BASE = ("go", "runtime", "wire")

ALLOWED: dict[str, frozenset[str]] = {
    **{part: frozenset(SERVER[:level]) for level, part in enumerate(SERVER)},
    "wire": frozenset(),  # what client and server both speak: it imports nothing of ours
    #: nsqlookupd: a daemon of its own over the transport and the HTTP API's shared parts; nothing of nsqd's broker,
    #: its surroundings or its front doors
    "lookupd": frozenset(("go", "runtime", "wire", "http_server", "web", "config")),
    "client": frozenset(CLIENT_BASE),
    "tools": frozenset((*CLIENT_BASE, "client")),
    "spark": frozenset((*CLIENT_BASE, "client")),
    #: nsqadmin: a server of its own over the transport, the envelope and router nsqd's API and nsqlookupd use too
    #: (web) and the log-level option kind (config); it talks to nsqd and lookupd over HTTP only, never through the
    #: broker's layers
    "admin": frozenset(("go", "runtime", "wire", "http_server", "web", "config")),
}
#: the top-level modules: __init__ asks core whether it is compiled; the test helpers users get use the client
TOP_LEVEL: dict[str, frozenset[str]] = {
    "__init__.py": frozenset(("runtime", "core")),
    "testing.py": frozenset((*CLIENT_BASE, "client")),
    "pytest_plugin.py": frozenset((*CLIENT_BASE, "client", "testing")),
}


def _ours(module: str) -> str | None:
    """The part of nsqd_py a module belongs to (`nsqd_py.core.topic` -> `core`), None for others' modules."""
    head, _, rest = module.partition(".")
    return rest.split(".")[0] if head == "nsqd_py" and rest else None


def _leaks(path: Path, own: str, allowed: frozenset[str], root: Path = PACKAGE.parent) -> set[str]:
    return {f"{path.relative_to(root)}: {module}" for module in imported_modules(path, root)
            if (part := _ours(module)) not in (None, own) and part not in allowed}


def imported_modules(path: Path, root: Path = PACKAGE.parent) -> set[str]:
    """Every module a file imports, anywhere in it (TYPE_CHECKING blocks and functions too), made absolute."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
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


@pytest.mark.parametrize("part", ALLOWED)
def test_no_import_runs_up(part: str) -> None:
    leaks = set().union(*(_leaks(path, part, ALLOWED[part]) for path in sorted((PACKAGE / part).rglob("*.py"))))
    assert not leaks


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_modules(name: str) -> None:
    assert not _leaks(PACKAGE / name, name.removesuffix(".py"), TOP_LEVEL[name])


def test_every_module_has_its_rules() -> None:
    """A new package or top-level module must say where it stands."""
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert packages == set(ALLOWED), packages ^ set(ALLOWED)
    assert {path.name for path in PACKAGE.glob("*.py")} == set(TOP_LEVEL)


def test_the_layer_rules_catch_an_upward_import(tmp_path: Path) -> None:
    """Guards the tests above against passing because they read nothing or allow everything."""
    assert "nsqd_py.core.topic" in imported_modules(PACKAGE / "core" / "nsqd.py")
    assert "nsqd_py.cluster.context" in imported_modules(PACKAGE / "daemon" / "program.py")
    probe = tmp_path / "nsqd_py" / "core" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from ..config.options import Options\nfrom ..daemon import program\n"
                     "import nsqd_py.http_api.pub\n")
    assert _leaks(probe, "core", ALLOWED["core"], tmp_path) == {
        "nsqd_py/core/probe.py: nsqd_py.daemon", "nsqd_py/core/probe.py: nsqd_py.daemon.program",
        "nsqd_py/core/probe.py: nsqd_py.http_api.pub"}


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


def test_setup_cfg_ships_every_package() -> None:
    """setup.cfg lists the packages by name: one left out installs without it (the wheel test finds that only
    minutes later)."""
    config = configparser.ConfigParser()
    config.read(PACKAGE.parent / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    on_disk = {".".join(path.parent.relative_to(PACKAGE.parent).parts) for path in PACKAGE.rglob("__init__.py")}
    assert listed - {"nsqd_py.apps"} == on_disk


COMPILED_TAG = 'Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").'


def _compiled_modules() -> set[str]:
    setup = (PACKAGE.parent / "setup.py").read_text()
    tree = ast.parse(setup)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COMPILED_MODULES" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("setup.py lists no COMPILED_MODULES")


def test_a_module_says_in_its_first_docstring_line_whether_it_is_compiled() -> None:
    compiled = _compiled_modules()
    assert len(compiled) > 20
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE.parent))
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert (doc.split("\n", 1)[0] == COMPILED_TAG) == (name in compiled), name


TESTS = PACKAGE.parent / "tests"
#: pytest's own ways to fail a test
_PYTEST_CHECKS = frozenset({"raises", "fail", "warns", "xfail"})


def _checks(node: ast.AST, helpers: set[str]) -> bool:
    """The function asserts, raises, or calls pytest's or a helper's check."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assert | ast.Raise):
            return True
        if isinstance(sub, ast.Call):
            func = sub.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in helpers or (called in _PYTEST_CHECKS and isinstance(func, ast.Attribute)):
                return True
    return False


def unchecking_tests(files: list[Path]) -> list[str]:
    """Test functions that could pass without checking anything: no assert, no raise, no pytest.raises/fail, and no
    call of a helper that does one of those (helpers are found in ``files``, transitively)."""
    functions = [node for path in files for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    helpers: set[str] = set()
    while True:
        found = {f.name for f in functions if not f.name.startswith("test_") and _checks(f, helpers)}
        if found <= helpers:
            break
        helpers |= found
    return sorted(f.name for f in functions if f.name.startswith("test_") and not _checks(f, helpers))


def test_every_test_checks_something() -> None:
    files = [*sorted(TESTS.rglob("*.py")), PACKAGE / "testing.py"]
    assert unchecking_tests(files) == []


def test_a_test_that_checks_nothing_is_caught(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("def expect_ok(x):\n    assert x\n\n"
                      "def test_checks():\n    expect_ok(1)\n\n"
                      "def test_only_runs():\n    print('no check')\n")
    assert unchecking_tests([sample]) == ["test_only_runs"]

