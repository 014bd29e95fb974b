"""The record kinds on a broker-worker link (runtime/link.py) and their payloads.

A worker owns its clients' sockets: it reads, parses and checks every command, and does TLS, compression,
heartbeats and output buffering. The broker owns topics, channels and in-flight messages: the worker forwards it
what changes them and the broker sends back deliveries and the answers only it can give. Each record names the
connection by the worker's number for it.
"""

from __future__ import annotations

# ---- worker -> broker ----------------------------------------------------------------------------------------
#: a client connected; payload: its remote address
OPEN = 1
#: the client's IDENTIFY or AUTH changed what /stats shows of it or how it is served; payload: JSON (identity.py)
IDENTITY = 2
#: SUB; payload: topic, b"\n", channel. Answered by ANSWER or FATAL.
SUB = 3
#: RDY; payload: the count in ASCII
RDY = 4
#: FIN; payload: the message id. A failure comes back as ERROR.
FIN = 5
#: REQ; payload: the message id, then the delay in ms in ASCII
REQ = 6
#: TOUCH; payload: the message id
TOUCH = 7
#: CLS (the worker answers CLOSE_WAIT itself)
CLS = 8
#: PUB; payload: topic, b"\n", body. Answered by ANSWER or FATAL, in order with the connection's other PUBs.
PUB = 9
#: DPUB; payload: topic, b"\n", delay in ms, b"\n", body
DPUB = 10
#: MPUB; payload: topic, b"\n", then each body behind its 4-byte length
MPUB = 11
#: create a topic (MPUB creates its topic before reading the body, as nsqd does); a failure comes back as FATAL
CREATE_TOPIC = 12
#: the connection ended
CLOSED = 13

# ---- broker -> worker ----------------------------------------------------------------------------------------
#: the first record: what the worker serves by; payload: pickled WorkerSettings
HELLO = 20
#: the answer to a SUB or a PUB; payload: the response frame's data
ANSWER = 21
#: a fatal error answering a SUB, a PUB or CREATE_TOPIC; payload: the error frame's data. The connection closes.
FATAL = 22
#: a non-fatal error (FIN, REQ, TOUCH); payload: the error frame's data
ERROR = 23
#: a message frame that may wait in the output buffer
MESSAGE = 24
#: a message frame to send with this loop turn (the client has no RDY left)
MESSAGE_NOW = 25
#: close the connection (its channel was deleted)
KICK = 26
#: stop: close the listener and every connection, then exit
EXIT = 27
