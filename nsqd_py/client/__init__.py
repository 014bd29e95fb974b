"""A small blocking NSQ client (protocol V2) on plain sockets: no gevent needed, fine under monkey-patching.

Used by the tools (nsq_to_file, to_nsq, nsq_tail, nsq_stat), bench/ and the Spark connector.

Publishing — `Producer` (thread-safe; one connection, opened lazily, replaced when it breaks)::

    from nsqd_py.client import Producer
    with Producer("127.0.0.1:4150") as p:
        p.pub("events", b"hello")              # waits for OK; ServerError on an error frame
        p.mpub("events", [b"a", b"b"])
        p.dpub("events", 1500, b"later")       # deferred by 1500 ms

  `Producer(address, identify={...}, tls_context=None, timeout=5.0, retries=2, retry_delay=0.5)`.
  A broken connection is reopened and the publish retried (`retries` times, doubling `retry_delay`); after
  that `NSQConnectionError`. A retry after a lost reply can duplicate a message (NSQ is at-least-once).

Consuming, high level — `Consumer` (drive it from one thread)::

    from nsqd_py.client import Consumer
    c = Consumer("events", "archive", nsqd_tcp_addresses=["127.0.0.1:4150"],   # or lookupd_http_addresses=[...]
                 max_in_flight=200, identify={"heartbeat_interval": 10000}, log=my_log)
    while running:
        for msg in c.poll(timeout=1.0):       # Message(id, body, timestamp, attempts, conn)
            handle(msg.body)
            c.fin(msg)                        # or c.req(msg, delay_ms), c.touch(msg)
    c.stop()                                  # CLS everywhere; poll()/fin() until c.drained
    c.close()

  RDY = max(1, max_in_flight // connections) per connection. Failed connections are retried with a doubling
  delay (`max_reconnect_interval`, default 15 s), lookupd is re-queried every `lookupd_poll_interval` (60 s).
  `is_starved()` is go-nsq's rule (a connection with >= 85 % of its RDY in flight). `log(level, text)` gets
  connection events (levels from `nsqd_py.runtime.log`). No max-attempts give-up: redelivered messages keep coming.

Consuming, low level — `Connection` (one reader thread, any number of sender threads)::

    conn = Connection("127.0.0.1:4150", timeout=5.0, tls_context=None).connect()
    conn.identify(heartbeat_interval=5000, snappy=True)   # -> nsqd's JSON; tls_v1/snappy/deflate upgrades done
    conn.sub("events", "ch"); conn.rdy(10)
    frame = conn.read_frame(timeout=1.0)   # Message | Response | ServerError | None (timeout);
                                           # heartbeats are answered with NOP and skipped
    conn.fin(frame.id); conn.req(id, delay_ms); conn.touch(id); conn.nop(); conn.cls(); conn.close()

  Also `pub/mpub/dpub/auth` and `request(raw)` on a connection that is not subscribed. `address` is
  `host:port`, `[v6]:port` or a unix socket path. `closed` turns true once the socket is gone (any I/O error
  closes it); a Connection is not reopened — make a new one.

HTTP helpers (`requests`, timeouts = (connect, request) seconds):
  `lookup_producers(lookupd, topic)` -> `["broadcast_address:tcp_port", ...]` (`[]` for an unknown topic),
  `lookupd_topics([lookupd, ...])` -> sorted topic names, `nsqd_stats(http_address, topic="", channel="")`
  -> `/stats?format=json` as a dict.

Errors (all `NSQError`): `NSQConnectionError` (connect failed / connection broke), `ServerError` (`.code`,
`.description`, `.fatal`), `ProtocolError` (unexpected bytes), `HTTPError` (`.status`).
"""

from .connection import DEFAULT_USER_AGENT, Connection
from .consumer import Consumer
from .errors import HTTPError, NSQConnectionError, NSQError, ProtocolError, ServerError
from .http import lookup_producers, lookupd_topics, nsqd_stats
from .producer import Producer
from .protocol import Message, Response

__all__ = [
    "DEFAULT_USER_AGENT",
    "Connection",
    "Consumer",
    "HTTPError",
    "Message",
    "NSQConnectionError",
    "NSQError",
    "Producer",
    "ProtocolError",
    "Response",
    "ServerError",
    "lookup_producers",
    "lookupd_topics",
    "nsqd_stats",
]
