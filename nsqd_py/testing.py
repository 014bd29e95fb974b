"""A real nsqd-py (and nsqlookupd) for other projects' test suites: no Go binaries to download.

    from nsqd_py.testing import NsqdServer

    with NsqdServer() as nsqd:                      # free loopback ports, a temporary data dir
        nsqd.publish("events", b"hello")            # over HTTP
        print(nsqd.tcp_address, nsqd.http_address)  # give these to pynsq, gnsq, go-nsq ...

The servers are subprocesses of this Python (`python -m nsqd_py.apps.nsqd`), started and checked like client
harnesses do: the process is up once its ports answer; `stop()` sends SIGTERM (nsqd flushes and exits) and
falls back to SIGKILL. The pytest plugin (`nsqd_py.pytest_plugin`, installed as `nsqd_py`) turns these into
the fixtures `nsqd` and `nsqlookupd`.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import IO

__all__ = ["LookupdServer", "NsqdServer", "ServerError", "free_port"]


class ServerError(RuntimeError):
    """The server did not come up; the message holds its log."""


def _ephemeral_ports() -> range:
    """The kernel's range for the local ports of outgoing connections (Linux; its default elsewhere)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


_RECENT_PORTS: deque[int] = deque(maxlen=2000)


def _own_ports(below: int) -> range:
    """The loopback ports this process picks from: 10000 up to the ephemeral range, and under pytest-xdist the
    worker's own slice of them, so that two workers never hand out the same port."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0):
        return range(10000, below)
    size = (below - 10000) // int(count)
    start = 10000 + size * (int(worker[2:]) % int(count))
    return range(start, start + size)


def free_port() -> int:
    """A loopback port nothing listens on, chosen below the ephemeral range: a port from that range can be taken
    by any client's outgoing connection before the server binds it. The port is not one this process handed out
    recently: a caller asking for two ports before binding either (tcp and http) gets two."""
    ephemeral = _ephemeral_ports()
    ports = _own_ports(ephemeral.start) if ephemeral.start > 11000 else range(0)
    for _ in range(50):
        port = random.choice(ports) if len(ports) > 1000 else 0
        if port in _RECENT_PORTS:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = sock.getsockname()[1]
        if port not in _RECENT_PORTS:
            _RECENT_PORTS.append(port)
            return port
    raise OSError("no free port found")


def _request(method: str, url: str, timeout: float, body: bytes | None = None) -> bytes:
    """The answer's body, through urllib3 (imported here: the plugin stays light), on a pool of its own. Failures
    are those of urllib.request, which this module used before, so that callers' handlers still match: HTTPError
    for a status of 400 or more, URLError (an OSError) when the server cannot be reached. No retries; redirects
    are followed (10 at most, as urllib.request did)."""
    import urllib3

    try:
        with urllib3.PoolManager(timeout=timeout, retries=urllib3.Retry(total=None, connect=0, read=False, status=0,
                                                                        other=0, redirect=10)) as pool:
            resp = pool.request(method, url, body=body)
    except urllib3.exceptions.HTTPError as err:
        raise urllib.error.URLError(err) from err
    if resp.status >= 400:
        import email.message

        headers = email.message.Message()
        for name, value in resp.headers.items():
            headers[name] = value
        raise urllib.error.HTTPError(url, resp.status, resp.reason or "", headers, io.BytesIO(resp.data))
    return resp.data


class _Server:
    """A daemon of this package as a subprocess with its own temporary directory and log file."""

    module = ""
    name = ""

    def __init__(self, *flags: str, data_dir: str | Path | None = None, start_timeout: float = 20.0) -> None:
        self.flags = list(flags)
        self.start_timeout = start_timeout
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tcp_port = free_port()
        self.http_port: int | None = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        """One log per port, so a server restarted on the same directory has a log of its own."""
        return self.data_dir / f"{self.name}-{self.tcp_port}.log"

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.http_address}"

    def command(self) -> list[str]:
        """The executable: this Python running the daemon's module."""
        return [sys.executable, "-m", self.module]

    def args(self) -> list[str]:
        http = f"--http-address={self.http_address}" if self.http_port else "--http-address="
        return [*self.command(), f"--tcp-address={self.tcp_address}", http, *self.flags]

    def start(self, timeout: float | None = None) -> _Server:
        """Start it and wait until its ports answer (``timeout``: instead of ``start_timeout``). A port another
        process took since it was chosen is replaced by a new one, twice at most."""
        for _ in range(2):
            try:
                return self._start_once(timeout)
            except ServerError as err:
                if "address already in use" not in str(err):
                    raise
                self.tcp_port = free_port()
                if self.http_port is not None:
                    self.http_port = free_port()
        return self._start_once(timeout)

    def _start_once(self, timeout: float | None) -> _Server:
        wait = self.start_timeout if timeout is None else timeout
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(self.args(), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._log.close()
                self._log = None
                raise ServerError(f"{self.name} exited with {self.process.returncode}:\n{self.log()}")
            if self._answers():
                return self
            time.sleep(0.05)
        self.stop()
        raise ServerError(f"{self.name} did not start in {wait} s:\n{self.log()}")

    def _answers(self) -> bool:
        """Its TCP port accepts and, with HTTP, /ping answers (only once the daemon has fully started); any
        answer counts (with `--tls-required` plain HTTP gets a 403)."""
        try:
            self._connect_tcp()
            if self.http_port is None:
                return True
            _request("GET", f"{self.http_url}/ping", timeout=1)
            return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def _connect_tcp(self) -> None:
        """One connection to the TCP listener, closed again: OSError until it listens."""
        with socket.create_connection(("127.0.0.1", self.tcp_port), timeout=0.2):
            pass

    def stop(self, timeout: float = 30.0, sig: int = signal.SIGTERM) -> int | None:
        """``sig`` (SIGTERM: a clean nsqd shutdown), SIGKILL after ``timeout``; returns the exit status."""
        code = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(sig)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            code = self.process.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def cleanup(self) -> None:
        """Stop, and remove the data directory if this object made it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> _Server:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()


class NsqdServer(_Server):
    """nsqd on free loopback ports. Extra ``flags`` are nsqd's (`--mem-queue-size=0`, ...)."""

    module = "nsqd_py.apps.nsqd"
    name = "nsqd"

    def __init__(self, *flags: str, lookupd: LookupdServer | None = None, data_dir: str | Path | None = None,
                 start_timeout: float = 20.0, http: bool = True) -> None:
        """``http=False``: no HTTP listener (`--http-address=`)."""
        if lookupd is not None:
            flags = (*flags, f"--lookupd-tcp-address={lookupd.tcp_address}")
        super().__init__(*flags, data_dir=data_dir, start_timeout=start_timeout)
        if not http:
            self.http_port = None

    def args(self) -> list[str]:
        return [*super().args(), f"--data-path={self.data_dir}"]

    def __enter__(self) -> NsqdServer:
        self.start()
        return self

    def publish(self, topic: str, *bodies: bytes) -> None:
        """POST /pub (one body) or /mpub (several) over HTTP."""
        query = urllib.parse.urlencode({"topic": topic})
        if len(bodies) == 1:
            path, data = "/pub", bodies[0]
        else:
            path, data = "/mpub", b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
            data = len(bodies).to_bytes(4, "big") + data
            query += "&binary=true"
        if _request("POST", f"{self.http_url}{path}?{query}", timeout=10, body=data) != b"OK":
            raise RuntimeError(f"nsqd did not acknowledge the publish to {topic}")

    def consume(self, topic: str, channel: str, count: int, timeout: float = 10.0) -> list[bytes]:
        """Subscribe, FIN and return the bodies of ``count`` messages (TimeoutError if fewer arrive in time)."""
        from .client import Consumer  # imported when first used: the plugin stays light

        consumer = Consumer(topic, channel, nsqd_tcp_addresses=[self.tcp_address], max_in_flight=max(1, count))
        bodies: list[bytes] = []
        deadline = time.monotonic() + timeout
        try:
            while len(bodies) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(bodies)} of {count} messages from {topic}/{channel} in {timeout} s")
                for msg in consumer.poll(min(left, 0.5)):
                    bodies.append(msg.body)
                    consumer.fin(msg)
        finally:
            consumer.close()
        return bodies

    def delete_topic(self, topic: str) -> None:
        """POST /topic/delete: the topic, its channels and messages go; a topic that was never made is fine."""
        query = urllib.parse.urlencode({"topic": topic})
        try:
            _request("POST", f"{self.http_url}/topic/delete?{query}", timeout=10, body=b"")
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise

    def stats(self, topic: str = "", **params: str) -> dict:
        """/stats as JSON (for ``topic`` only when given; ``params``: more of its parameters, `channel=...`)."""
        query = urllib.parse.urlencode({"format": "json", **({"topic": topic} if topic else {}), **params})
        return json.loads(_request("GET", f"{self.http_url}/stats?{query}", timeout=10))


class LookupdServer(_Server):
    """nsqlookupd on free loopback ports."""

    module = "nsqd_py.apps.nsqlookupd"
    name = "nsqlookupd"

    def __enter__(self) -> LookupdServer:
        self.start()
        return self
