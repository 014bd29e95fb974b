"""runtime/compiled_build.py: a compiled module whose source changed after the build is named, with the command that
rebuilds it, at start-up in a checkout and before the suite runs; an unchanged one, a pure-Python module and a
wheel install (no setup.py beside the package) are left alone."""

from __future__ import annotations

import os
from pathlib import Path

from nsqd_py.runtime.compiled_build import stale_modules, start_up_warning, write_record

MODULES = ["nsqd_py/core/topic.py", "nsqd_py/core/plain.py"]


def _checkout(root: Path) -> Path:
    (root / "nsqd_py" / "core").mkdir(parents=True)
    (root / "setup.py").write_text("")
    for module in MODULES:
        (root / module).write_text("x = 1\n")
    (root / "nsqd_py/core/topic.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")  # only topic.py is compiled
    write_record(root, MODULES)
    return root


def _edit(path: Path, text: str) -> None:
    path.write_text(text)
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))  # a later mtime, whatever the clock


def test_a_fresh_build_is_not_stale(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    assert stale_modules(root) == []
    assert start_up_warning(False, root) is None


def test_an_edited_compiled_module_is_named_with_the_fix(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    _edit(root / "nsqd_py/core/topic.py", "x = 2\n")
    assert stale_modules(root) == ["nsqd_py/core/topic.py"]
    warning = start_up_warning(False, root)
    assert warning is not None and "nsqd_py/core/topic.py" in warning and "make install" in warning
    assert start_up_warning(True, root) is None  # NSQD_PY_PURE runs the edited source itself


def test_a_touched_but_unchanged_source_is_not_stale(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    _edit(root / "nsqd_py/core/topic.py", "x = 1\n")  # a checkout of another branch and back: new mtime, same text
    assert stale_modules(root) == []


def test_a_module_without_a_compiled_extension_is_never_stale(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    _edit(root / "nsqd_py/core/plain.py", "x = 3\n")
    assert stale_modules(root) == []


def test_an_installed_wheel_says_nothing(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    (root / "setup.py").unlink()
    _edit(root / "nsqd_py/core/topic.py", "x = 2\n")
    assert start_up_warning(False, root) is None


def test_no_record_means_nothing_was_compiled(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    (root / "nsqd_py" / "compiled_sources.txt").unlink()
    _edit(root / "nsqd_py/core/topic.py", "x = 2\n")
    assert stale_modules(root) == []
