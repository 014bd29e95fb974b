"""nsqd's options for an executable (`nsqd`, gunicorn's worker): a bad flag or config ends the process with
nsqd's message and exit status."""

from __future__ import annotations

import sys
import time

from nsqd_py.log import Logger
from nsqd_py.options import ConfigError, Options, OptionsError, ResolveError, parse_options
from nsqd_py.version import version_line


def options_or_exit(argv: list[str]) -> Options:
    """`parse_options` for an executable: on a bad flag or config, nsqd's message and exit status 1
    (usage errors already exited 2); `--version` prints nsqd's version line and exits 0."""
    try:
        opts = parse_options(argv)
    except ConfigError as err:
        Logger().fatal(str(err))
        sys.exit(1)
    except ResolveError as err:  # Go's plain log.Fatalf: no prefix, no level
        print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {err}", file=sys.stderr)
        sys.exit(1)
    except OptionsError as err:
        Logger().fatal(f"failed to instantiate nsqd - {err}")
        sys.exit(1)
    if opts.show_version:
        print(version_line())
        sys.exit(0)
    return opts
