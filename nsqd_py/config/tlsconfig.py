"""The server TLS context built from nsqd's --tls-* options; shared by TCP (tls_v1) and HTTPS."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .options import Options

if TYPE_CHECKING:
    import ssl

#: --tls-min-version numbers (Go's tls.VersionTLS1x) to the names of Python's ssl.TLSVersion
_VERSIONS = {0x0301: "TLSv1", 0x0302: "TLSv1_1", 0x0303: "TLSv1_2", 0x0304: "TLSv1_3"}
_VERSION_NAMES = {"TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}
#: OpenSSL's names of the TLS 1.2 suites to the IANA names Go reports (TLS 1.3 names are the same in both)
_SUITE_NAMES = {
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-RSA-AES128-SHA": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "ECDHE-RSA-AES256-SHA": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "AES128-GCM-SHA256": "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "AES256-GCM-SHA384": "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "AES128-SHA": "TLS_RSA_WITH_AES_128_CBC_SHA",
    "AES256-SHA": "TLS_RSA_WITH_AES_256_CBC_SHA",
}


class TLSConfigError(Exception):
    """The certificate, key or CA file could not be loaded (nsqd: `failed to build TLS config`)."""


def build_server_context(opts: Options) -> ssl.SSLContext | None:
    """None when no cert/key is configured (then tls_v1 is never granted and HTTPS is off).

    `--tls-client-auth-policy=require` and `require-verify` both demand a client certificate that
    verifies against --tls-root-ca-file (or the system CAs): Python's ssl module cannot accept an
    unverified client certificate the way Go's RequireAnyClientCert does.
    """
    if not opts.tls_cert and not opts.tls_key:
        return None
    import ssl  # here: only with TLS configured (importing ssl is ~6 ms of a start that needs none)

    from gevent import ssl as gevent_ssl

    ctx = gevent_ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(opts.tls_cert, opts.tls_key)
        if opts.tls_root_ca_file:
            ctx.load_verify_locations(opts.tls_root_ca_file)
        elif opts.tls_client_auth_policy:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(f"failed to build TLS config - {err}") from None
    ctx.minimum_version = ssl.TLSVersion[_VERSIONS.get(opts.tls_min_version, "TLSv1")]
    if opts.tls_min_version <= 0x0302:
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let old clients in when the operator asked for them
    if opts.tls_client_auth_policy:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def version_name(sock: ssl.SSLSocket) -> str:
    version = sock.version() or ""
    return _VERSION_NAMES.get(version, f"Unknown {version}")


def cipher_suite_name(sock: ssl.SSLSocket) -> str:
    cipher = sock.cipher()
    if not cipher:
        return ""
    return _SUITE_NAMES.get(cipher[0], cipher[0])
