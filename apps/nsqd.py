"""`nsqd`: parse flags and config, then run the program until SIGINT/SIGTERM."""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402

from nsqd_py import service  # noqa: E402
from nsqd_py.core.nsqd import StartupError  # noqa: E402
from nsqd_py.log import Logger  # noqa: E402
from nsqd_py.options import options_or_exit  # noqa: E402
from nsqd_py.program import NSQDProgram  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    opts = options_or_exit(sys.argv[1:] if argv is None else argv)
    logger = Logger(opts.log_prefix, opts.log_level)
    try:
        service.run(NSQDProgram(opts, logger))
    except StartupError as err:
        logger.fatal(f"failed to instantiate nsqd - {err}")
        sys.exit(1)


if __name__ == "__main__":
    main()
