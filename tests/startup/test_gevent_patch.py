"""nsqd_py.daemon.gevent_patch: monkey-patching with one entry-point scan still runs gevent's plugins, and leaves
importlib.metadata as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # runs a Python subprocess with a fake plugin on its path

PLUGIN = '''
def will(event):
    print("will_patch_all", type(event).__name__)

def did(event):
    print("did_patch_all", type(event).__name__)
'''

ENTRY_POINTS = '''[gevent.plugins.monkey.will_patch_all]
fake = fake_gevent_plugin:will

[gevent.plugins.monkey.did_patch_all]
fake = fake_gevent_plugin:did
'''

PROBE = '''
from importlib import metadata
before = metadata.entry_points
from nsqd_py.daemon.gevent_patch import patch_all
patch_all()
from gevent import monkey
print("socket patched", monkey.is_module_patched("socket"))
print("entry_points restored", metadata.entry_points is before)
'''


def test_plugins_still_run_and_entry_points_is_restored(tmp_path: Path) -> None:
    (tmp_path / "fake_gevent_plugin.py").write_text(PLUGIN)
    info = tmp_path / "fake_gevent_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-gevent-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "will_patch_all GeventWillPatchAllEvent",
        "did_patch_all GeventDidPatchAllEvent",
        "socket patched True",
        "entry_points restored True",
    ]
