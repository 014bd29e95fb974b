"""Dial one nsqd with the format's connection options: IDENTIFY (TLS/snappy/deflate, msg_timeout, and the settings
operators see and tune in nsqadmin: client_id, hostname, heartbeat_interval, output_buffer_timeout, sample_rate),
then AUTH."""

from __future__ import annotations

import ssl

from ..client.connection import Connection
from ..runtime.version import PY_VERSION
from .options import ConnectOptions

USER_AGENT = f"nsqd_py.spark/{PY_VERSION}"


def tls_context(opts: ConnectOptions) -> ssl.SSLContext | None:
    """Built where it is used: SSL contexts do not pickle."""
    if not opts.tls:
        return None
    context = ssl.create_default_context(cafile=opts.tls_ca_file)
    if opts.tls_cert_file:
        context.load_cert_chain(opts.tls_cert_file, opts.tls_key_file)
    if opts.tls_insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def open_connection(address: str, opts: ConnectOptions) -> Connection:
    """A connected, identified (and authenticated, when nsqd requires it) connection; closed again on failure."""
    conn = Connection(address, timeout=opts.connect_timeout, tls_context=tls_context(opts),
                      tls_server_hostname=opts.tls_server_name, user_agent=USER_AGENT)
    conn.connect()
    try:
        negotiated = conn.identify(**opts.identify_fields())
        if negotiated.get("auth_required"):
            if not opts.auth_secret:
                raise PermissionError(f"nsqd {address} requires AUTH: set the 'authSecret' option")
            conn.auth(opts.auth_secret)
    except BaseException:
        conn.close()
        raise
    return conn
