"""`nsqlookupd`: parse flags and config, then serve until SIGINT/SIGTERM."""

from __future__ import annotations

import sys

from nsqd_py.runtime.version import exit_if_only_version

_PREFIX = "[nsqlookupd] "


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    exit_if_only_version(args, "nsqlookupd")
    from nsqd_py.daemon.gevent_patch import patch_all  # sockets, DNS, ssl, time.sleep: before anything using them

    patch_all()
    from nsqd_py.config.options import parsed_or_exit
    from nsqd_py.daemon import service
    from nsqd_py.lookupd.nsqlookupd import LookupdStartupError, NSQLookupd
    from nsqd_py.lookupd.options import parse_options
    from nsqd_py.runtime.compiled_build import warn_if_stale
    from nsqd_py.runtime.log import Logger

    opts = parsed_or_exit(parse_options, args, "nsqlookupd")
    logger = Logger(opts.log_prefix, opts.log_level)
    warn_if_stale(logger)
    try:
        service.run(NSQLookupd(opts, logger))
    except LookupdStartupError as err:
        # nsqlookupd's own quirk: logFatal("failed to instantiate nsqlookupd", err) has no %s for err
        Logger(_PREFIX).fatal(f"failed to instantiate nsqlookupd%!(EXTRA *errors.errorString={err})")
        sys.exit(1)


if __name__ == "__main__":
    main()
