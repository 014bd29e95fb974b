"""nsqd-py: a drop-in replacement for NSQ's nsqd on gevent."""

import os

from .runtime.pure_python import prefer_sources, pure_requested

if pure_requested(os.environ):
    prefer_sources()


def is_compiled() -> bool:
    """True when the message path runs as mypyc-compiled C (False: pure Python)."""
    from .core import channel

    return not channel.__file__.endswith(".py")
