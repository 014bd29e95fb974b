"""Helpers for the tool tests: run the installed console scripts, publish with curl, a fake nsqlookupd."""

from __future__ import annotations

import gzip
import json
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support import NsqdProcess

BIN = Path(sys.executable).parent


class Tool:
    """A tool running as a real process; stdout and stderr go to files so long outputs never block it."""

    def __init__(self, workdir: Path, name: str, *args: str, stdin: Any = subprocess.DEVNULL,
                 prefix: Sequence[str] = (), **popen: Any) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.out_path = workdir / f"{name}.{id(self)}.out"
        self.err_path = workdir / f"{name}.{id(self)}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([*prefix, str(BIN / name), *args], stdin=stdin, stdout=out, stderr=err,
                                         **popen)

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_tool(name: str, *args: str, input: bytes = b"", timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / name), *args], input=input, capture_output=True, timeout=timeout)


def curl_pub(nsqd: NsqdProcess, topic: str, lines: list[str]) -> None:
    """Publish with curl: /mpub with newline-separated bodies (one request), or /pub per body without curl."""
    body = "\n".join(lines).encode()
    if shutil.which("curl"):
        out = subprocess.run(["curl", "-sS", "--fail", "--data-binary", "@-", f"{nsqd.http_url}/mpub?topic={topic}"],
                             input=body, capture_output=True, timeout=30)
        assert out.returncode == 0 and out.stdout == b"OK", out
        return
    import requests

    assert requests.post(f"{nsqd.http_url}/mpub", params={"topic": topic}, data=body, timeout=10).text == "OK"


def gzip_lines(path: Path) -> list[str]:
    """Every line of a (multi-member) gzip file; fails if the file is not complete, valid gzip."""
    with gzip.open(path, "rt") as f:
        return f.read().splitlines()


class _LookupdHandler(BaseHTTPRequestHandler):
    producers: list[dict] = []
    topics: list[str] = []

    def do_GET(self) -> None:
        if self.path.startswith("/lookup?topic="):
            topic = self.path.split("=", 1)[1]
            if topic in self.topics:
                self._reply(200, {"channels": [], "producers": self.producers})
            else:
                self._reply(404, {"message": "TOPIC_NOT_FOUND"})
        elif self.path == "/topics":
            self._reply(200, {"topics": self.topics})
        else:
            self._reply(404, {"message": "NOT_FOUND"})

    def _reply(self, status: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class FakeLookupd:
    """An nsqlookupd HTTP stand-in: every listed topic lives on the given nsqd."""

    def __init__(self, nsqds: list[NsqdProcess], topics: list[str]) -> None:
        producers = [{"broadcast_address": "127.0.0.1", "tcp_port": n.tcp_port, "http_port": n.http_port}
                     for n in nsqds]
        handler = type("Handler", (_LookupdHandler,), {"producers": producers, "topics": topics})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
