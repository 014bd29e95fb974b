"""The one place that knows our version strings (imports nothing heavy: `--version` must answer fast)."""

import re
import sys

#: The NSQ protocol/API version we are compatible with; clients see this in IDENTIFY and /info.
NSQ_VERSION = "1.3.0"
#: Our own release.
PY_VERSION = "0.2.0"
#: The build word: client test harnesses parse it with `[a-z0-9.-]+`, and it says this is nsqd-py.
#: (sys.version's first word is platform.python_version(), without importing platform: 5 ms of start-up)
BUILD = re.sub(r"[^a-z0-9.-]", "-", f"python{sys.version.split(' ', 1)[0]}-nsqdpy{PY_VERSION}".lower())

#: the spellings of a true Go bool flag `-version`
_VERSION_FLAGS = frozenset(f"{dashes}version{value}" for dashes in ("-", "--")
                           for value in ("", "=true", "=1", "=t", "=T", "=TRUE", "=True"))


def version_line(app: str = "nsqd") -> str:
    """`nsqd v1.3.0 (built w/python3.11.7-nsqdpy0.2.0)`: Go's `<app> v<version> (built w/<build>)` shape, which
    NSQ's tools and client test harnesses parse."""
    return f"{app} v{NSQ_VERSION} (built w/{BUILD})"


def exit_if_only_version(argv: list[str], app: str) -> None:
    """`<app> --version` alone: print the line and exit before anything heavy is imported (harnesses run it
    once per test). With other flags the full parse decides, as Go's flag package does."""
    if argv and all(arg in _VERSION_FLAGS for arg in argv):
        print(version_line(app))
        sys.exit(0)
