"""nsqd inside the test process: the broker, its HTTP app called with falcon.testing's environ and its TCP connection
handler over socket pairs. No subprocess and no listening port is used, so answer tables run in milliseconds;
what needs a real process (signals, restarts, real clients, the HTTP server's parser) stays in tests/support.py.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import falcon.testing
import gevent
from gevent import socket

from nsqd_py.client.protocol import mpub_body
from nsqd_py.cluster.context import ServerContext
from nsqd_py.config.options import Options
from nsqd_py.core.nsqd import NSQD
from nsqd_py.http_api.app import create_app
from nsqd_py.runtime.log import Logger
from nsqd_py.tcp.server import TCPServer
from tests.support import FRAME_RESPONSE, NsqdProcess, RawConn, Reply

Conn = TypeVar("Conn", bound=RawConn)


class InProcessNsqd:
    def __init__(self, data_path: Path, **options: Any) -> None:
        self.data_path = Path(data_path)
        self.data_path.mkdir(parents=True, exist_ok=True)
        self._log = io.StringIO()
        self.nsqd = NSQD(Options(data_path=str(data_path), **options), Logger(stream=self._log))
        self.ctx = ServerContext(self.nsqd)
        self.app = create_app(self.ctx)
        self._listener = socket.socket()  # TCPServer wants one; it is never started (connections are pairs)
        self._listener.bind(("127.0.0.1", 0))
        self.tcp = TCPServer(self.ctx, self._listener)
        self.nsqd.start()

    def request(self, method: str, target: str, body: bytes | None = None,
                headers: list[tuple[str, str]] | None = None) -> Reply:
        """Like support.request, through the app instead of a socket. Falcon's own environ and start_response
        (not TestClient.simulate_request, whose wsgiref validator refuses the Content-Type-less answers that
        Go nsqd sends, such as 200 with an empty body)."""
        path, _, query = target.partition("?")
        env = falcon.testing.create_environ(path=path, query_string=query, method=method, body=body or b"",
                                            headers=headers or [])
        start_response = falcon.testing.StartResponseMock()
        data = b"".join(self.app(env, start_response))
        assert start_response.status is not None and start_response.headers is not None
        return Reply(int(start_response.status.split()[0]), list(start_response.headers), data)

    def connect(self, magic: bytes = b"  V2", timeout: float = 5, conn_class: type[Conn] = RawConn) -> Conn:
        """A protocol V2 connection served by a greenlet, as the TCP server would serve an accepted one
        (``conn_class``: a RawConn subclass to talk through, SecureConn say)."""
        ours, theirs = socket.socketpair()
        gevent.spawn(self.tcp.handle, theirs, None)
        return conn_class(ours, magic=magic, timeout=timeout)

    def subscriber(self, topic: str, channel: str = "c", rdy: int = 1) -> RawConn:
        """A connection that identified, subscribed and sent RDY ``rdy``."""
        conn = self.connect()
        conn.identify()
        assert conn.sub(topic, channel) == (FRAME_RESPONSE, b"OK")
        conn.send(f"RDY {rdy}")
        return conn

    def publish(self, topic: str, *bodies: bytes) -> None:
        """PUB (one body) or MPUB (several) from a connection of its own, and expect OK."""
        conn = self.connect()
        if len(bodies) == 1:
            conn.send(f"PUB {topic}", bodies[0])
        else:
            conn.send(f"MPUB {topic}", mpub_body(list(bodies)))
        assert conn.frame() == (FRAME_RESPONSE, b"OK")
        conn.close()

    def log(self) -> str:
        """Everything nsqd logged so far (as NsqdProcess.log())."""
        return self._log.getvalue()

    def stats(self, **params: str) -> dict:
        return self.request("GET", "/stats?" + "&".join(f"{k}={v}" for k, v in {"format": "json", **params}.items())
                            ).json()

    def close(self) -> None:
        self.tcp.close_clients()
        self.nsqd.exit()
        self._listener.close()


#: the `inproc_factory` fixture: an in-process nsqd with the given Options fields
InProcessFactory = Callable[..., InProcessNsqd]
#: either kind of nsqd a test helper may get: both answer request(), connect(), stats() and log()
Nsqd = NsqdProcess | InProcessNsqd
