"""The build: mypyc-compiled message path where a C compiler is present, pure Python on request."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import nsqd_py
from nsqd_py.runtime.pure_python import pure_requested

ROOT = Path(__file__).resolve().parents[2]
PROBE = ("import nsqd_py; from nsqd_py.core import channel, message_queue; "
         "print(nsqd_py.is_compiled(), message_queue.__file__)")


def _have_compiler() -> bool:
    return shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is not None


def _probe(value: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, "NSQD_PY_PURE": value},
                          capture_output=True, text=True)


def test_message_path_compiled_unless_pure_python_is_asked_for() -> None:
    expected = _have_compiler() and not pure_requested(os.environ)
    assert nsqd_py.is_compiled() == expected


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "Yes", "on", " on "])
def test_pure_values(value: str) -> None:
    assert pure_requested({"NSQD_PY_PURE": value})


@pytest.mark.parametrize("value", ["", "0", "false", "False", "NO", "off"])
def test_compiled_values(value: str) -> None:
    assert not pure_requested({"NSQD_PY_PURE": value})
    assert not pure_requested({})


@pytest.mark.parametrize("value", ["2", "pure", "y", "compiled"])
def test_other_values_are_an_error_naming_the_choices(value: str) -> None:
    with pytest.raises(ValueError, match=r"NSQD_PY_PURE=.*use 1, true, yes or on .* 0, false, no, off or empty"):
        pure_requested({"NSQD_PY_PURE": value})


def test_pure_python_switch_imports_the_sources() -> None:
    out = _probe("1")
    assert out.returncode == 0, out.stderr
    compiled, queue_file = out.stdout.split()
    assert compiled == "False"
    assert queue_file.endswith("message_queue.py")


@pytest.mark.skipif(not nsqd_py.is_compiled(), reason="needs the compiled build installed")
def test_zero_keeps_the_compiled_build() -> None:
    out = _probe("0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "True"


def test_an_unclear_value_stops_the_import_with_the_choices() -> None:
    out = _probe("fast")
    assert out.returncode != 0
    assert "NSQD_PY_PURE='fast': use 1, true, yes or on for pure Python" in out.stderr


def test_setup_py_reads_the_variable_the_same_way() -> None:
    """setup.py evaluates the build choice before setuptools parses its command: a bad value stops it."""
    out = subprocess.run([sys.executable, "setup.py", "--name"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "NSQD_PY_PURE": "fast"})
    assert out.returncode != 0
    assert "NSQD_PY_PURE='fast': use 1, true, yes or on" in out.stderr
    pure = subprocess.run([sys.executable, "setup.py", "--name"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "NSQD_PY_PURE": "yes"})
    assert pure.returncode == 0, pure.stderr
    assert pure.stdout.split()[-1] == "nsqd-py"
