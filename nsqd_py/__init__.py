"""nsqd-py: a drop-in replacement for NSQ's nsqd on gevent."""

import os

if os.environ.get("NSQD_PY_PURE"):
    from .pure_python import prefer_sources

    prefer_sources()


def is_compiled() -> bool:
    """True when the message path runs as mypyc-compiled C (False: pure Python)."""
    from .core import channel

    return not channel.__file__.endswith(".py")
