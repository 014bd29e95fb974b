"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Listening sockets the way nsqd opens them: `host:port`, or a unix socket path."""

from __future__ import annotations

import contextlib
import os
import socket
from types import ModuleType

from ..go.gocompat import join_host_port


class ListenError(Exception):
    """Opening a listener failed; the text is nsqd's `listen (<addr>) failed - ...`."""


def is_unix_address(address: str) -> bool:
    """nsqd treats anything that is not host:port as a unix socket path."""
    _host, sep, port = address.rpartition(":")
    return not sep or not port.isdigit()


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def display_address(sock: socket.socket) -> str:
    """How nsqd prints a bound address: `127.0.0.1:4150`, `[::]:4150` for any-address, or the path."""
    if sock.family == socket.AF_UNIX:
        return sock.getsockname()
    host, port = sock.getsockname()[:2]
    return join_host_port("::" if host == "0.0.0.0" else host, port)


def listen(address: str, backlog: int = 1024) -> socket.socket:
    """A bound, listening socket (gevent-cooperative) for a TCP address or unix path."""
    from gevent import socket as gsocket

    try:
        if is_unix_address(address):
            # like Go, an existing file at the path is an error ("address already in use"), never removed
            sock = gsocket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(address)
        else:
            sock = _bind_tcp(gsocket, *split_host_port(address))
        sock.listen(backlog)
    except OSError as err:
        kind = "unix" if is_unix_address(address) else "tcp"
        reason = (err.strerror or str(err)).lower()
        raise ListenError(f"listen ({address}) failed - listen {kind} {address}: bind: {reason}") from None
    return sock


def _bind_tcp(gsocket: ModuleType, host: str, port: int) -> socket.socket:
    """Like Go, an any-address (`0.0.0.0` or empty) listens dual-stack where IPv6 exists."""
    if host in ("", "0.0.0.0"):
        try:
            sock = gsocket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        except OSError:
            pass
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(("::", port))
            return sock
        host = "0.0.0.0"
    sock = gsocket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def send_all(sock: socket.socket, data: bytes) -> None:
    """`sock.sendall` without gevent's per-call getsockopt(SO_SNDBUF) syscall: a loop of plain
    sends (each waits cooperatively when the socket is full)."""
    sent = sock.send(data)
    if sent == len(data):
        return
    with memoryview(data) as view:
        while sent < len(data):
            sent += sock.send(view[sent:])


def unix_path(sock: socket.socket) -> str | None:
    """The file of a unix socket listener (None for TCP); read it before closing the socket."""
    return sock.getsockname() if sock.family == socket.AF_UNIX else None


def remove_socket_file(path: str | None) -> None:
    """After closing a unix listener its file goes too, as Go's UnixListener.Close does."""
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


def port_of(sock: socket.socket) -> int:
    """The bound port, or -1 for a unix socket (as nsqd reports it in /info)."""
    if sock.family == socket.AF_UNIX:
        return -1
    return sock.getsockname()[1]


def peer_address(sock: socket.socket, address: object) -> str:
    """`ip:port` as nsqd and nsqlookupd print a remote address (`@` for a unix socket peer, like Go)."""
    if sock.family == socket.AF_UNIX:
        return "@"
    host, port = address[:2]  # type: ignore[index]
    if host.startswith("::ffff:"):
        host = host[7:]
    return join_host_port(host, port)
