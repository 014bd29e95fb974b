"""`nsqd`: parse flags and config, then run the program until SIGINT/SIGTERM."""

from __future__ import annotations

import sys

from nsqd_py.runtime.version import exit_if_only_version


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    exit_if_only_version(args, "nsqd")
    from nsqd_py.daemon.gevent_patch import patch_all  # sockets, DNS, ssl, time.sleep: before anything using them

    patch_all()
    from nsqd_py.config.options import options_or_exit
    from nsqd_py.core.nsqd import StartupError
    from nsqd_py.daemon import service
    from nsqd_py.daemon.program import NSQDProgram
    from nsqd_py.runtime.compiled_build import warn_if_stale
    from nsqd_py.runtime.log import Logger

    opts = options_or_exit(args)
    logger = Logger(opts.log_prefix, opts.log_level)
    warn_if_stale(logger)
    try:
        service.run(NSQDProgram(opts, logger))
    except StartupError as err:
        logger.fatal(f"failed to instantiate nsqd - {err}")
        sys.exit(1)


if __name__ == "__main__":
    main()
