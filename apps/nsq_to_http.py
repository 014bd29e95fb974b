"""`nsq_to_http`: flags as in NSQ's Go tool; the work is in nsqd_py.tools.nsq_to_http."""

from nsqd_py.tools.common import tool_main
from nsqd_py.tools.nsq_to_http import parse_options, run

main = tool_main(parse_options, run)

if __name__ == "__main__":
    main()
