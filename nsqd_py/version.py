"""The one place that knows our version strings."""

import platform

#: The NSQ protocol/API version we are compatible with; clients see this in IDENTIFY and /info.
NSQ_VERSION = "1.3.0"
#: Our own release.
PY_VERSION = "0.1.0"
#: What `--version`, the startup log line and /stats text print.
FULL_VERSION = f"{NSQ_VERSION}-py{PY_VERSION}"


def version_line(app: str = "nsqd") -> str:
    """`nsqd v1.3.0-py0.1.0 (built w/python3.11.7)`, the shape NSQ's tools parse."""
    return f"{app} v{FULL_VERSION} (built w/python{platform.python_version()})"
