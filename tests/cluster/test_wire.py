"""The exact bytes nsqd sends to nsqlookupd, read by a fake lookupd socket in the test."""

from __future__ import annotations

import json
import socket
import struct
import threading

import requests

from nsqd_py.cluster.lookup_peer import Command, PeerInfo, register, unregister

_IDENTIFY_REPLY = b'{"broadcast_address":"127.0.0.1","hostname":"lk","http_port":1,"tcp_port":2,"version":"1.3.0"}'


class FakeLookupd:
    """Accepts one nsqd connection; a thread answers its IDENTIFY at once (nsqd waits only 1 s), then the
    test reads each command and replies."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.conn: socket.socket | None = None
        self.buf = b""
        self.greeting: tuple[bytes, str, bytes] | None = None
        self._thread = threading.Thread(target=self._greet, daemon=True)
        self._thread.start()

    def _greet(self) -> None:
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(10)
        self.greeting = (self._read(4), self.line(), self.body())
        self.reply(_IDENTIFY_REPLY)

    def wait_greeting(self) -> tuple[bytes, str, bytes]:
        self._thread.join(10)
        assert self.greeting is not None
        return self.greeting

    def line(self) -> str:
        while b"\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def body(self) -> bytes:
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def reply(self, data: bytes) -> None:
        assert self.conn is not None
        self.conn.sendall(struct.pack(">i", len(data)) + data)

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _fill(self) -> None:
        assert self.conn is not None
        chunk = self.conn.recv(65536)
        assert chunk, "nsqd closed the connection"
        self.buf += chunk

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


def test_identify_and_register_bytes(nsqd_factory) -> None:
    fake = FakeLookupd()
    try:
        nsqd = nsqd_factory(f"--lookupd-tcp-address={fake.address}", "--broadcast-address=node1",
                            "--topology-zone=z9")
        magic, line, body = fake.wait_greeting()
        assert (magic, line) == (b"  V1", "IDENTIFY")
        info = json.loads(body)
        assert list(info) == ["broadcast_address", "hostname", "http_port", "tcp_port", "topology_region",
                              "topology_zone", "version"]
        assert body == json.dumps(info, separators=(",", ":")).encode()
        assert (info["broadcast_address"], info["tcp_port"], info["http_port"]) == ("node1", nsqd.tcp_port,
                                                                                   nsqd.http_port)
        assert (info["topology_zone"], info["topology_region"], info["version"]) == ("z9", "", "1.3.0")
        # lookupd's http_port 1 refuses the channel query; the topic is registered all the same
        requests.post(f"{nsqd.http_url}/topic/create", params={"topic": "w"}, timeout=5)
        assert fake.line() == "REGISTER w"
        fake.reply(b"OK")
        requests.post(f"{nsqd.http_url}/channel/create", params={"topic": "w", "channel": "c"}, timeout=5)
        assert fake.line() == "REGISTER w c"
        fake.reply(b"OK")
        requests.post(f"{nsqd.http_url}/topic/delete", params={"topic": "w"}, timeout=5)
        assert fake.line() == "UNREGISTER w"
        fake.reply(b"OK")
        assert "LOOKUPD(" + fake.address + "): peer info {TCPPort:2 HTTPPort:1 Version:1.3.0 " \
            "BroadcastAddress:127.0.0.1}" in nsqd.log()
    finally:
        fake.close()


def test_commands_and_peer_info() -> None:
    assert register("t").to_bytes() == b"REGISTER t\n"
    assert unregister("t", "c").to_bytes() == b"UNREGISTER t c\n"
    assert Command("IDENTIFY", body=b"{}").to_bytes() == b"IDENTIFY\n\x00\x00\x00\x02{}"
    assert str(Command("IDENTIFY", body=b"{}")) == "IDENTIFY"
    info = PeerInfo.from_json(b'{"tcp_port":4160,"http_port":4161,"version":"1.3.0","broadcast_address":"::1"}')
    assert str(info) == "{TCPPort:4160 HTTPPort:4161 Version:1.3.0 BroadcastAddress:::1}"
    assert info.http_address == "[::1]:4161"
    for bad in (b"E_BAD_BODY IDENTIFY missing fields", b'{"tcp_port":"x"}', b"[]"):
        try:
            PeerInfo.from_json(bad)
        except ValueError:
            continue
        raise AssertionError(bad)
