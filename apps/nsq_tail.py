"""`nsq_tail`: flags as in NSQ's Go tool; the work is in nsqd_py.tools.nsq_tail."""

from __future__ import annotations

import sys

from nsqd_py.tools.nsq_tail import parse_options, run


def main(argv: list[str] | None = None) -> None:
    opts = parse_options(sys.argv[1:] if argv is None else argv)
    if opts is not None:
        run(opts)


if __name__ == "__main__":
    main()
