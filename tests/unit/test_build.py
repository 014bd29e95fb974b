"""The build: mypyc-compiled message path where a C compiler is present, pure Python on request."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import nsqd_py


def _have_compiler() -> bool:
    return shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is not None


def test_message_path_compiled_unless_pure_python_is_asked_for() -> None:
    expected = _have_compiler() and not os.environ.get("NSQD_PY_PURE")
    assert nsqd_py.is_compiled() == expected


def test_pure_python_switch_imports_the_sources() -> None:
    code = "import nsqd_py; from nsqd_py.core import channel, queue; print(nsqd_py.is_compiled(), queue.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "NSQD_PY_PURE": "1"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"
    assert out[1].endswith("queue.py")
