"""What nsqd imports before it listens: the modules only some features need wait for their first use, so that
every start (and every test's fresh nsqd) does not pay for them (bench/bench_startup.py measures it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # a Python subprocess: this one has imported everything already

#: the modules apps/nsqd.py imports before program.init() opens the listeners
PROBE = '''
import sys
from nsqd_py.daemon.gevent_patch import patch_all
patch_all()
from nsqd_py.config.options import options_or_exit
from nsqd_py.daemon import service
from nsqd_py.daemon.program import NSQDProgram
packages = {"requests", "urllib3", "certifi", "prometheus_client", "falcon", "ssl", "_ssl", "cramjam"}
modules = {"nsqd_py.tcp.client", "nsqd_py.tcp.protocol", "nsqd_py.go.gojson"}
print(" ".join(sorted(name for name in sys.modules if name.split(".")[0] in packages or name in modules)))
'''


def test_no_auth_or_metrics_client_or_falcon_before_listening() -> None:
    """requests and urllib3 (auth servers, lookupd channel queries), prometheus_client (/metrics) and Falcon (the
    HTTP routes but the shortcuts) load on first use; so do ssl (TLS configured, a TCP client's TLS upgrade,
    requests: daemon/gevent_patch.py patches it as it is imported), the TCP protocol's modules with cramjam (the
    first client) and go/gojson.py (a lookupd peer's IDENTIFY reply)."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
