"""`nsqd`: parse flags and config, then run the program until SIGINT/SIGTERM."""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402
import time  # noqa: E402

from nsqd_py import service  # noqa: E402
from nsqd_py.core.nsqd import StartupError  # noqa: E402
from nsqd_py.log import Logger  # noqa: E402
from nsqd_py.options import ConfigError, OptionsError, ResolveError, parse_options  # noqa: E402
from nsqd_py.program import NSQDProgram  # noqa: E402
from nsqd_py.version import version_line  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_options(args)
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
        return
    logger = Logger(opts.log_prefix, opts.log_level)
    try:
        service.run(NSQDProgram(opts, logger))
    except StartupError as err:
        logger.fatal(f"failed to instantiate nsqd - {err}")
        sys.exit(1)


if __name__ == "__main__":
    main()
