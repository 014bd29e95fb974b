"""Our nsqd, nsqlookupd and nsqadmin as commands for tests/admin/scenario.py."""

from __future__ import annotations

import sys

PY = [sys.executable, "-m"]
NSQD = [*PY, "nsqd_py.apps.nsqd"]
LOOKUPD = [*PY, "nsqd_py.apps.nsqlookupd"]
NSQADMIN = [*PY, "nsqd_py.apps.nsqadmin"]
