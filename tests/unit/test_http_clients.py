"""Which HTTP client each part of the product uses (issue 49; docs/design.md, "HTTP clients"), read from the source.

requests only in the blocking client and the tools (their entry points in apps/ import none of it), urllib3
everywhere else. No standard-library client (urllib.request, http.client) and no other library: nsqadmin's
admin/plain_http.py speaks HTTP on its own sockets, and imports neither. What nsqd and nsqlookupd load before they
listen, and testing.py (the pytest plugin's), import their HTTP client in the function that asks, not at the top.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nsqd_py

PACKAGE = Path(nsqd_py.__file__).parent
ROOT = PACKAGE.parent
APPS = ROOT / "apps"  # installed as nsqd_py.apps

#: where requests may be imported
REQUESTS_IN = ("nsqd_py/client/", "nsqd_py/tools/")
#: HTTP clients imported nowhere in the product
NOWHERE = ("urllib.request", "http.client", "httpx", "aiohttp", "httplib2", "pycurl", "geventhttpclient",
           "tornado.httpclient", "tornado.simple_httpclient", "tornado.curl_httpclient")
#: the server's packages (tests/unit/test_layers.py's SERVER), its executables and testing.py, whose HTTP clients
#: (and the CA bundle urllib3 gets) load at their first call
SERVER = ("go", "runtime", "wire", "http_server", "web", "config", "core", "cluster", "tcp", "http_api", "lookupd",
          "daemon")
LAZY_IN = (*(f"nsqd_py/{part}/" for part in SERVER), "nsqd_py/__init__.py", "nsqd_py/testing.py",
           "nsqd_py/pytest_plugin.py", "apps/nsqd.py", "apps/nsqlookupd.py")
LAZY = ("requests", "urllib3", "certifi")


@dataclass(frozen=True)
class Import:
    path: str  # from the repository's root
    line: int
    #: the dotted name imported (`from a import b` gives `a.b`: b may be a module)
    name: str
    #: run when the module is imported: not in a function, nor under `if TYPE_CHECKING:`
    at_import: bool

    def of(self, *modules: str) -> bool:
        return any(self.name == module or self.name.startswith(f"{module}.") for module in modules)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name}"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports_in(node: ast.AST, path: str, at_import: bool) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import):
            yield from (Import(path, child.lineno, alias.name, at_import) for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            if child.level == 0 and child.module:  # a relative import is one of ours
                yield from (Import(path, child.lineno, f"{child.module}.{alias.name}", at_import)
                            for alias in child.names)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _imports_in(child, path, False)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.body:
                yield from _imports_in(ast.Module(body=[statement], type_ignores=[]), path, False)
            for statement in child.orelse:
                yield from _imports_in(ast.Module(body=[statement], type_ignores=[]), path, at_import)
        else:
            yield from _imports_in(child, path, at_import)


def _all_imports() -> list[Import]:
    files = sorted([*PACKAGE.rglob("*.py"), *APPS.rglob("*.py")])
    assert len(files) > 100, "the source tree was not found"
    return [found for file in files
            for found in _imports_in(ast.parse(file.read_text(), str(file)), file.relative_to(ROOT).as_posix(), True)]


IMPORTS = _all_imports()


def test_the_scan_sees_top_level_and_lazy_imports() -> None:
    """Not vacuous: the Spark connector's urllib3 at the top, the blocking client's requests and the auth query's
    urllib3 in their functions."""
    assert any(i.path == "nsqd_py/spark/clocks.py" and i.of("urllib3") and i.at_import for i in IMPORTS)
    assert any(i.path == "nsqd_py/client/http.py" and i.of("requests") and not i.at_import for i in IMPORTS)
    assert any(i.path == "nsqd_py/cluster/auth.py" and i.of("urllib3") and not i.at_import for i in IMPORTS)


def test_requests_only_in_the_client_and_the_tools() -> None:
    outside = [str(i) for i in IMPORTS if i.of("requests") and not i.path.startswith(REQUESTS_IN)]
    assert outside == [], "requests is for client/ and tools/ only; use urllib3 (docs/design.md, HTTP clients)"


def test_no_other_http_client() -> None:
    found = [str(i) for i in IMPORTS if i.of(*NOWHERE)]
    assert found == [], "the product's HTTP clients are requests and urllib3 (docs/design.md, HTTP clients)"


def test_http_clients_load_at_first_use_where_start_up_time_counts() -> None:
    eager = [str(i) for i in IMPORTS if i.of(*LAZY) and i.at_import and i.path.startswith(LAZY_IN)]
    assert eager == [], "import these in the function that makes the request: nsqd loads them before it listens"
