"""NSQD_PY_PURE: choose the pure-Python build, read the same way at build time (setup.py) and run time.

Python's path finder prefers an extension module over a source file of the same name; the finder below,
placed first, looks only for sources inside nsqd_py (and leaves everything else to the usual finders).
This module imports only the standard library: setup.py loads it by path, before nsqd_py is installed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import SOURCE_SUFFIXES, FileFinder, ModuleSpec, SourceFileLoader
from types import ModuleType

ENV = "NSQD_PY_PURE"
_PURE = frozenset({"1", "true", "yes", "on"})
#: unset or empty also means compiled: `NSQD_PY_PURE=0` must not select the slow build
_COMPILED = frozenset({"", "0", "false", "no", "off"})


def pure_requested(environ: Mapping[str, str]) -> bool:
    """True when NSQD_PY_PURE asks for pure Python; a value that is neither yes nor no is an error,
    since guessing either way runs a build the user did not ask for."""
    value = environ.get(ENV, "").strip().lower()
    if value in _PURE:
        return True
    if value in _COMPILED:
        return False
    raise ValueError(f"{ENV}={environ[ENV]!r}: use 1, true, yes or on for pure Python; "
                     f"0, false, no, off or empty for the compiled build")


class SourceFirstFinder:
    @classmethod
    def find_spec(cls, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if not name.startswith("nsqd_py.") or not path:
            return None
        for entry in path:
            spec = FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES)).find_spec(name, target)
            if spec is not None:
                return spec
        return None


def prefer_sources() -> None:
    if SourceFirstFinder not in sys.meta_path:
        sys.meta_path.insert(0, SourceFirstFinder)
