"""What every part of the process uses: logging, listening sockets, fair turns on the event loop, the
compiled-or-pure choice and the version."""
