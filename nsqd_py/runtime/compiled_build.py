"""Whether the compiled modules were built from the sources beside them.

After an edit to a module setup.py compiles with mypyc, the old compiled module keeps running until `make install`
rebuilds it. So setup.py records, as it compiles, each source's digest, size and mtime (compiled_sources.txt in the
package); start-up in a checkout and the test suite compare the sources with it and name the command that fixes a
mismatch. Only the standard library, and none of it heavy (start-up pays for this): setup.py loads it by path,
before nsqd_py is installed.
"""

from __future__ import annotations

import glob
import os
from typing import Any

RECORD_NAME = "compiled_sources.txt"
#: the directory holding the nsqd_py package (a checkout's root, or site-packages)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = "run `make install` to rebuild them (or set NSQD_PY_PURE=1 to run the sources)"


def _digest(path: str) -> str:
    import hashlib  # only when a source's size or mtime changed

    with open(path, "rb") as source:
        return hashlib.sha256(source.read()).hexdigest()


def _stamp(path: str) -> str:
    status = os.stat(path)
    return f"{status.st_size} {status.st_mtime_ns}"


def write_record(root: str | os.PathLike[str], modules: list[str]) -> None:
    """Record the sources of ``modules`` (paths from ``root``, as setup.py lists them) as compiled now: a line
    `<sha256> <size> <mtime ns> <module>` each."""
    lines = []
    for module in modules:
        source = os.path.join(root, module)
        lines.append(f"{_digest(source)} {_stamp(source)} {module}\n")
    with open(os.path.join(root, "nsqd_py", RECORD_NAME), "w") as record:
        record.writelines(lines)


def _has_extension(source: str) -> bool:
    stem = os.path.splitext(source)[0]
    return bool(glob.glob(f"{glob.escape(stem)}.*.so") or glob.glob(f"{glob.escape(stem)}.*.pyd"))


def stale_modules(root: str | os.PathLike[str] = PACKAGE_ROOT) -> list[str]:
    """The compiled modules whose source differs from what they were built from (none without a record, i.e. when
    nothing was compiled). A source whose size and mtime are as recorded is not read."""
    try:
        with open(os.path.join(root, "nsqd_py", RECORD_NAME)) as record:
            lines = record.read().splitlines()
    except FileNotFoundError:
        return []
    stale = []
    for line in lines:
        digest, size, mtime, module = line.split(" ", 3)
        source = os.path.join(root, module)
        if not os.path.exists(source) or _stamp(source) == f"{size} {mtime}":
            continue
        if _has_extension(source) and _digest(source) != digest:
            stale.append(module)
    return sorted(stale)


def is_checkout(root: str | os.PathLike[str] = PACKAGE_ROOT) -> bool:
    """A development install: the package runs from the project's own tree."""
    return os.path.exists(os.path.join(root, "setup.py"))


def stale_message(stale: list[str]) -> str:
    return f"the compiled modules of {', '.join(stale)} were built from other sources than these: {FIX}"


def start_up_warning(pure: bool, root: str | os.PathLike[str] = PACKAGE_ROOT) -> str | None:
    """What start-up says in a checkout whose compiled modules are stale (None: nothing to say). ``pure``: the
    sources run anyway (NSQD_PY_PURE)."""
    if pure or not is_checkout(root):
        return None
    stale = stale_modules(root)
    return stale_message(stale) if stale else None


def warn_if_stale(logger: Any) -> None:
    """Log start_up_warning's text, if any, on a daemon's logger (nsqd, nsqlookupd and nsqadmin all load compiled
    modules)."""
    from .pure_python import pure_requested  # here: setup.py loads this module by path, with no package

    warning = start_up_warning(pure_requested(os.environ))
    if warning is not None:
        logger.warn(warning)
