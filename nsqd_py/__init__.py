"""nsqd-py: a drop-in replacement for NSQ's nsqd on gevent."""
