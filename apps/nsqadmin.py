"""`nsqadmin`: parse flags and config, then serve the admin API until SIGINT/SIGTERM."""

from __future__ import annotations

import sys

from nsqd_py.runtime.version import exit_if_only_version


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    exit_if_only_version(args, "nsqadmin")
    from nsqd_py.daemon.gevent_patch import patch_all  # sockets, DNS, ssl, time.sleep: before anything using them

    patch_all()
    from nsqd_py.admin.nsqadmin import AdminStartupError, NSQAdmin
    from nsqd_py.admin.options import parse_options
    from nsqd_py.config.options import parsed_or_exit
    from nsqd_py.daemon import service
    from nsqd_py.runtime.compiled_build import warn_if_stale
    from nsqd_py.runtime.log import Logger

    opts = parsed_or_exit(parse_options, args, "nsqadmin")
    logger = Logger(opts.log_prefix, opts.log_level)
    warn_if_stale(logger)
    try:
        service.run(NSQAdmin(opts, logger))
    except AdminStartupError as err:
        Logger("[nsqadmin] ").fatal(f"failed to instantiate nsqadmin - {err}")
        sys.exit(1)


if __name__ == "__main__":
    main()
