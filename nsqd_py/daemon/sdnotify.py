"""systemd's sd_notify protocol without libsystemd: one datagram to $NOTIFY_SOCKET per state change.

With `Type=notify` systemd considers nsqd started only after `READY=1` (sent once the listeners accept
connections), and `STOPPING=1` tells it the shutdown flush has begun. Outside systemd NOTIFY_SOCKET is unset
and every call is a no-op. Abstract sockets are given as `@name`.
"""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    """Send ``state`` (newline-separated `KEY=value` lines); False if there is no socket or sending failed —
    a service manager that cannot be told must never stop nsqd."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if address.startswith("@"):
        address = "\0" + address[1:]
    elif not address.startswith("/"):
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError:
        return False
    return True


def ready(status: str = "") -> bool:
    """Startup finished: listeners are up."""
    return notify(f"READY=1\nMAINPID={os.getpid()}" + (f"\nSTATUS={status}" if status else ""))


def stopping() -> bool:
    """Shutdown began (flushing queues to disk may take a while)."""
    return notify("STOPPING=1")
