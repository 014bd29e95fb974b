"""`nsq_to_file`: write NSQ topics to (gzipped, rotated) files; flags as in NSQ's Go tool."""

from nsqd_py.tools.common import tool_main
from nsqd_py.tools.nsq_to_file import parse_options, run

main = tool_main(parse_options, run)

if __name__ == "__main__":
    main()
