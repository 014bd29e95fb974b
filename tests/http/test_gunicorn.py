"""nsqd under gunicorn (configs/gunicorn.conf.py), started for real: publish over HTTP and TCP, consume over TCP,
then stop it and check that a plain nsqd on the same data dir delivers every message left unconsumed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from nsqd_py.client.protocol import mpub_body
from nsqd_py.testing import free_port
from tests.support import FRAME_RESPONSE, REPO, RawConn, drain

GUNICORN_BIN = Path(sys.executable).parent / "gunicorn"
CONFIG = REPO / "configs" / "gunicorn.conf.py"


class GunicornNsqd:
    """`gunicorn -c configs/gunicorn.conf.py` with nsqd's flags in NSQD_ARGS (and a TOML file in NSQD_CONFIG)."""

    def __init__(self, tmp_path: Path, nsqd_args: list[str], config: Path | None = None,
                 gunicorn_args: tuple[str, ...] = ()) -> None:
        self.log_path = tmp_path / f"gunicorn-{free_port()}.log"
        env = {**os.environ, "NSQD_ARGS": " ".join(nsqd_args)}
        if config is not None:
            env["NSQD_CONFIG"] = str(config)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in wait()
        # its own process group, so a test can Ctrl-C it as a terminal would: SIGINT to master and worker
        self.proc = subprocess.Popen([str(GUNICORN_BIN), "-c", str(CONFIG), *gunicorn_args], env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, tcp_port: int, http_port: int, timeout: float = 20) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", tcp_port), timeout=0.2):
                    pass
                requests.get(f"http://127.0.0.1:{http_port}/ping", timeout=1).raise_for_status()
                return
            except (OSError, requests.RequestException):
                time.sleep(0.05)
        raise RuntimeError(f"gunicorn did not start:\n{self.log()}")

    def wait(self, timeout: float = 20) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def gunicorn_factory(tmp_path: Path):
    started: list[GunicornNsqd] = []

    def start(*args, **kwargs) -> GunicornNsqd:
        started.append(GunicornNsqd(tmp_path, *args, **kwargs))
        return started[-1]

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            proc.proc.terminate()
        proc.wait()


def publish(tcp_port: int, http_url: str, topic: str) -> list[bytes]:
    """/pub, /mpub, PUB and MPUB; every one answered OK. Returns the bodies."""
    assert requests.post(f"{http_url}/pub", params={"topic": topic}, data=b"http-1", timeout=5).text == "OK"
    assert requests.post(f"{http_url}/mpub", params={"topic": topic}, data=b"http-2\nhttp-3\nhttp-4",
                         timeout=5).text == "OK"
    conn = RawConn(tcp_port)
    conn.identify()
    conn.send(f"PUB {topic}", b"tcp-1")
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    conn.send(f"MPUB {topic}", mpub_body([b"tcp-2", b"tcp-3"]))
    assert conn.frame() == (FRAME_RESPONSE, b"OK")
    conn.close()
    return [b"http-1", b"http-2", b"http-3", b"http-4", b"tcp-1", b"tcp-2", b"tcp-3"]


def channels(http_url: str, topic: str) -> dict[str, dict]:
    stats = requests.get(f"{http_url}/stats", params={"format": "json", "topic": topic}, timeout=5).json()
    (row,) = stats["topics"]
    return {"": row} | {channel["channel_name"]: channel for channel in row["channels"]}


@pytest.mark.parametrize("stop", ["sigterm", "ctrl-c"])
def test_serves_tcp_and_http_and_flushes_everything_on_stop(gunicorn_factory, nsqd_factory, tmp_path: Path,
                                                            stop: str) -> None:
    data, tcp_port, http_port = tmp_path / "data", free_port(), free_port()
    data.mkdir()
    toml = tmp_path / "nsqd.toml"
    toml.write_text(f'data_path = "{data}"\nhttp_address = "127.0.0.1:{http_port}"\ntcp_address = "127.0.0.1:1"\n')
    server = gunicorn_factory([f"--tcp-address=127.0.0.1:{tcp_port}"], config=toml)  # the flag beats the TOML
    server.wait_ready(tcp_port, http_port)
    http_url = f"http://127.0.0.1:{http_port}"
    info = requests.get(f"{http_url}/info", timeout=5).json()
    assert (info["tcp_port"], info["http_port"]) == (tcp_port, http_port)

    topic = "gunicorn"
    assert requests.post(f"{http_url}/topic/create", params={"topic": topic}, timeout=5).status_code == 200
    for channel in ("kept", "eaten"):
        assert requests.post(f"{http_url}/channel/create", params={"topic": topic, "channel": channel},
                             timeout=5).status_code == 200
    bodies = publish(tcp_port, http_url, topic)
    assert [m.body for m in drain(tcp_port, topic, "eaten", idle=0.5)] == bodies
    held = RawConn(tcp_port)  # one message of "kept" in flight, never FINished, when nsqd stops
    held.identify()
    assert held.sub(topic, "kept") == (FRAME_RESPONSE, b"OK")
    held.send("RDY 1")
    assert held.message().body in bodies

    stats = channels(http_url, topic)
    assert stats[""]["message_count"] == len(bodies)
    assert (stats["eaten"]["depth"], stats["eaten"]["in_flight_count"]) == (0, 0)
    assert (stats["kept"]["depth"], stats["kept"]["in_flight_count"]) == (len(bodies) - 1, 1)

    if stop == "sigterm":
        server.proc.send_signal(signal.SIGTERM)
    else:  # the terminal signals the whole group; the master then also sends the worker SIGQUIT
        os.killpg(server.proc.pid, signal.SIGINT)
    assert server.wait() == 0, server.log()
    assert "NSQ: bye" in server.log()
    assert held.is_closed()
    held.close()

    restarted = nsqd_factory(data_path=data)
    assert sorted(m.body for m in drain(restarted.tcp_port, topic, "kept", idle=0.5)) == sorted(bodies)
    assert drain(restarted.tcp_port, topic, "eaten", idle=1.0) == []


def test_a_locked_data_dir_stops_gunicorn_instead_of_respawning(gunicorn_factory, nsqd_factory,
                                                                  tmp_path: Path) -> None:
    running = nsqd_factory()
    server = gunicorn_factory([f"--data-path={running.data_path}", f"--tcp-address=127.0.0.1:{free_port()}",
                               f"--http-address=127.0.0.1:{free_port()}"])
    assert server.wait() == 3  # gunicorn's "Worker failed to boot."
    assert "failed to instantiate nsqd - failed to lock data-path" in server.log()


@pytest.mark.parametrize(("gunicorn_args", "message"), [
    (("--workers=2",), "exactly one worker"),
    (("--worker-class=sync",), "needs the gevent worker class"),
])
def test_refuses_anything_but_one_gevent_worker(gunicorn_factory, tmp_path: Path, gunicorn_args: tuple[str, ...],
                                                message: str) -> None:
    server = gunicorn_factory([f"--data-path={tmp_path}", f"--tcp-address=127.0.0.1:{free_port()}",
                               f"--http-address=127.0.0.1:{free_port()}"], gunicorn_args=gunicorn_args)
    assert server.wait() != 0
    assert message in server.log()


def test_bad_nsqd_flags_fail_like_nsqd(gunicorn_factory) -> None:
    server = gunicorn_factory(["--max-deflate-level=10"])
    assert server.wait() == 1
    assert "failed to instantiate nsqd - --max-deflate-level must be [1,9]" in server.log()


def test_a_drain_under_gunicorn_ends_with_the_master(gunicorn_factory, tmp_path: Path) -> None:
    """Beyond nsqd: PUT /config/drain; once the consumer has everything, nsqd asks gunicorn's master to stop, and the
    whole server exits 0 (a worker that only exited would be booted again)."""
    data, tcp_port, http_port = tmp_path / "data", free_port(), free_port()
    data.mkdir()
    server = gunicorn_factory([f"--tcp-address=127.0.0.1:{tcp_port}", f"--http-address=127.0.0.1:{http_port}",
                               f"--data-path={data}", "--sigterm=drain"])  # drain mode: gunicorn keeps its signals
    server.wait_ready(tcp_port, http_port)
    http_url = f"http://127.0.0.1:{http_port}"
    topic = f"gdrain{free_port()}"
    assert requests.post(f"{http_url}/topic/create", params={"topic": topic}, timeout=5).ok
    assert requests.post(f"{http_url}/channel/create", params={"topic": topic, "channel": "c"}, timeout=5).ok
    assert requests.post(f"{http_url}/pub", params={"topic": topic}, data=b"left", timeout=5).text == "OK"
    assert requests.put(f"{http_url}/config/drain", timeout=5).status_code == 200
    assert requests.post(f"{http_url}/pub", params={"topic": topic}, data=b"late", timeout=5).status_code == 503
    conn = RawConn(tcp_port)
    conn.identify()
    assert conn.sub(topic, "c") == (FRAME_RESPONSE, b"OK")
    conn.send("RDY 1")
    msg = conn.message()
    assert msg.body == b"left"
    conn.send(b"FIN " + msg.id)  # the last message: the drain ends, nsqd closes the connection and stops
    assert server.wait(timeout=30) == 0
    assert "NSQ: drained" in server.log()
