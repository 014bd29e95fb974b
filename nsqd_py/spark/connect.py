"""Dial one nsqd with the format's connection options: IDENTIFY (TLS/snappy/deflate, msg_timeout, and the settings
operators see and tune in nsqadmin: client_id, hostname, heartbeat_interval, output_buffer_timeout, sample_rate),
then AUTH.

A failure here is one of two kinds, and callers treat them apart: nsqd is down or cannot be reached (refused, timed
out, reset: it may answer later), or the connection can never work as configured (a CA file missing on this host, a
certificate nsqd or we refuse, `tls` asked for and not granted, AUTH required or refused, a topic nsqd refuses):
`ConnectionConfigError`, which names the option, the file or nsqd's answer."""

from __future__ import annotations

import socket
import ssl

from ..client.connection import Connection
from ..client.errors import NSQError, ProtocolError, ServerError
from ..runtime.version import PY_VERSION
from .options import ConnectOptions

USER_AGENT = f"nsqd_py.spark/{PY_VERSION}"

#: nsqd's answers that the same request can never get past: authorization and names, not the node's health
_REFUSALS = frozenset({"E_AUTH_FAILED", "E_AUTH_DISABLED", "E_UNAUTHORIZED", "E_BAD_TOPIC", "E_BAD_CHANNEL",
                       "E_BAD_BODY", "E_INVALID", "E_IDENTIFY_FAILED"})


class ConnectionConfigError(NSQError):
    """The connection cannot work as configured; retrying or waiting for the node does not help."""


def tls_context(opts: ConnectOptions) -> ssl.SSLContext | None:
    """Built where it is used (SSL contexts do not pickle), so a file missing on an executor shows here."""
    return ssl_context(opts) if opts.tls else None


def ssl_context(opts: ConnectOptions) -> ssl.SSLContext:
    """The TLS settings of the options (CA, client certificate, verification), also for the driver's HTTPS survey."""
    try:
        context = ssl.create_default_context(cafile=opts.tls_ca_file)
    except (OSError, ssl.SSLError) as err:
        raise ConnectionConfigError(f"option 'tlsCaFile': cannot load {opts.tls_ca_file!r} on "
                                    f"{socket.gethostname()}: {err}") from err
    if opts.tls_cert_file:
        try:
            context.load_cert_chain(opts.tls_cert_file, opts.tls_key_file)
        except (OSError, ssl.SSLError) as err:
            raise ConnectionConfigError(f"options 'tlsCertFile'/'tlsKeyFile': cannot load {opts.tls_cert_file!r} "
                                        f"on {socket.gethostname()}: {err}") from err
    if opts.tls_insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def open_connection(address: str, opts: ConnectOptions) -> Connection:
    """A connected, identified (and authenticated, when nsqd requires it) connection; closed again on failure.
    Raises ConnectionConfigError for what configuration must fix, NSQError or OSError for a node that is down."""
    conn = Connection(address, timeout=opts.connect_timeout, tls_context=tls_context(opts),
                      tls_server_hostname=opts.tls_server_name, user_agent=USER_AGENT)
    conn.connect()
    try:
        negotiated = conn.identify(**opts.identify_fields())
        if opts.tls and not negotiated.get("tls_v1"):
            raise ConnectionConfigError(f"option 'tls' is true but nsqd {address} did not grant TLS (its IDENTIFY "
                                        f"answer has tls_v1 false: it has no --tls-cert/--tls-key): closed before "
                                        f"anything else was sent. Give nsqd a certificate, or set tls=false")
        if negotiated.get("auth_required"):
            if not opts.auth_secret:
                raise ConnectionConfigError(f"nsqd {address} requires AUTH: set the 'authSecret' option")
            conn.auth(opts.auth_secret)
    except BaseException as err:
        conn.close()
        refusal = as_config_error(err, address)
        if refusal is None or refusal is err:
            raise
        raise refusal from err
    return conn


def as_config_error(err: BaseException, address: str) -> ConnectionConfigError | None:
    """``err`` as a ConnectionConfigError when it says the configuration is wrong, None when the node may just be
    down (the same request may work later)."""
    if isinstance(err, ConnectionConfigError):
        return err
    if isinstance(err, ServerError) and err.code in _REFUSALS:
        return ConnectionConfigError(f"nsqd {address} refused: {err} (check 'authSecret', the topic and the "
                                     f"channel)")
    if isinstance(err, ProtocolError):
        return ConnectionConfigError(f"{address} does not speak nsqd's protocol as configured: {err}")
    cause = _ssl_cause(err)
    if cause is not None:
        return ConnectionConfigError(f"TLS with nsqd {address} failed: {cause} (check 'tlsCaFile', "
                                     f"'tlsServerName', 'tlsCertFile'/'tlsKeyFile', 'tlsInsecureSkipVerify')")
    return None


def _ssl_cause(err: BaseException) -> ssl.SSLError | None:
    """The TLS refusal behind ``err`` (a certificate, a protocol version); not an EOF, which a node going down
    mid-handshake gives too."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ssl.SSLError) and not isinstance(seen, ssl.SSLEOFError | ssl.SSLZeroReturnError):
            return seen
        seen = seen.__cause__
    return None
