"""NSQD_PY_PURE=1: import nsqd_py's .py sources even where mypyc-compiled modules sit beside them.

Python's path finder prefers an extension module over a source file of the same name; this finder,
placed first, looks only for sources inside nsqd_py (and leaves everything else to the usual finders).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import SOURCE_SUFFIXES, FileFinder, ModuleSpec, SourceFileLoader
from types import ModuleType


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
