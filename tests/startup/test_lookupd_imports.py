"""nsqlookupd without the broker (issue 49): what its executable loads, transitively, as a process would load it
(tests/unit/test_layers.py holds each file's own imports)."""

from __future__ import annotations

import subprocess
import sys

#: the parts of nsqd that nsqlookupd must not load: the broker, its surroundings and its front doors
NSQD_ONLY = ("core", "cluster", "tcp", "http_api")


def test_nsqlookupd_loads_nothing_of_nsqd() -> None:
    """The imports of apps/nsqlookupd.py's main, in a fresh interpreter."""
    code = ("import sys, nsqd_py.daemon.gevent_patch, nsqd_py.daemon.service, nsqd_py.config.options, "
            "nsqd_py.lookupd.options, nsqd_py.lookupd.nsqlookupd; "
            "print('\\n'.join(m for m in sys.modules if m.startswith('nsqd_py.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "nsqd_py.lookupd.nsqlookupd" in loaded
    assert [m for m in loaded if m.split(".")[1] in NSQD_ONLY] == []
