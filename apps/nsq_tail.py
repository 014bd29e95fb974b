"""`nsq_tail`: flags as in NSQ's Go tool; the work is in nsqd_py.tools.nsq_tail."""

from nsqd_py.tools.common import tool_main
from nsqd_py.tools.nsq_tail import parse_options, run

main = tool_main(parse_options, run)

if __name__ == "__main__":
    main()
