"""nsqadmin's options: Go nsqadmin 1.3.0's flags, names, defaults and `--config` TOML keys, with go-options
precedence (a flag given on the command line > the TOML key > the default). Durations are int nanoseconds.

Cross-option checks (`--nsqd-http-address` or `--lookupd-http-address`, the TLS pair, the CIDR) are Go's
`nsqadmin.New()`'s and live in `validate`, which the program runs before listening.
"""

from __future__ import annotations

import ipaddress
import posixpath
from dataclasses import dataclass

from ..config.options import LOG_LEVEL
from ..go.durations import SECOND
from ..go.settings import BOOL, DURATION, LIST, STRING, deprecated_verbose, parse_daemon_options, setting
from ..runtime.log import INFO


@dataclass(slots=True)
class AdminOptions:
    log_level: int = setting("log-level", LOG_LEVEL, INFO, "set log verbosity: debug, info, warn, error, or fatal")
    log_prefix: str = setting("log-prefix", STRING, "[nsqadmin] ", "log message prefix")
    http_address: str = setting("http-address", STRING, "0.0.0.0:4171", "<addr>:<port> to listen on for HTTP clients")
    base_path: str = setting("base-path", STRING, "/", "URL base path")
    dev_static_dir: str = setting("dev-static-dir", STRING, "", "(development use only)")
    graphite_url: str = setting("graphite-url", STRING, "", "graphite HTTP address", go_field="GraphiteURL")
    proxy_graphite: bool = setting("proxy-graphite", BOOL, False, "proxy HTTP requests to graphite")
    statsd_prefix: str = setting("statsd-prefix", STRING, "nsq.%s", "prefix used for keys sent to statsd (%s for "
                                 "host replacement, must match nsqd)")
    statsd_counter_format: str = setting("statsd-counter-format", STRING, "stats.counters.%s.count",
                                         "The counter stats key formatting applied by the implementation of statsd. "
                                         "If no formatting is desired, set this to an empty string.")
    statsd_gauge_format: str = setting("statsd-gauge-format", STRING, "stats.gauges.%s",
                                       "The gauge stats key formatting applied by the implementation of statsd. "
                                       "If no formatting is desired, set this to an empty string.")
    statsd_interval: int = setting("statsd-interval", DURATION, 60 * SECOND,
                                   "time interval nsqd is configured to push to statsd (must match nsqd)")
    nsqlookupd_http_addresses: list[str] = setting("lookupd-http-address", LIST, [], "lookupd HTTP address (may be "
                                                   "given multiple times)", key="nsqlookupd_http_addresses")
    nsqd_http_addresses: list[str] = setting("nsqd-http-address", LIST, [], "nsqd HTTP address (may be given "
                                             "multiple times)", key="nsqd_http_addresses", go_field="NSQDHTTPAddresses")
    http_client_connect_timeout: int = setting("http-client-connect-timeout", DURATION, 2 * SECOND,
                                               "timeout for HTTP connect")
    http_client_request_timeout: int = setting("http-client-request-timeout", DURATION, 5 * SECOND,
                                               "timeout for HTTP request")
    http_client_tls_insecure_skip_verify: bool = setting(
        "http-client-tls-insecure-skip-verify", BOOL, False,
        "configure the HTTP client to skip verification of TLS certificates")
    http_client_tls_root_ca_file: str = setting("http-client-tls-root-ca-file", STRING, "",
                                                "path to CA file for the HTTP client",
                                                go_field="HTTPClientTLSRootCAFile")
    http_client_tls_cert: str = setting("http-client-tls-cert", STRING, "",
                                        "path to certificate file for the HTTP client")
    http_client_tls_key: str = setting("http-client-tls-key", STRING, "", "path to key file for the HTTP client")
    allow_config_from_cidr: str = setting("allow-config-from-cidr", STRING, "127.0.0.1/8",
                                          "A CIDR from which to allow HTTP requests to the /config endpoint",
                                          go_field="AllowConfigFromCIDR")
    notification_http_endpoint: str = setting("notification-http-endpoint", STRING, "",
                                              "HTTP endpoint (fully qualified) to which POST notifications of admin "
                                              "actions will be sent")
    acl_http_header: str = setting("acl-http-header", STRING, "X-Forwarded-User",
                                   "HTTP header to check for authenticated admin users", go_field="ACLHTTPHeader")
    admin_users: list[str] = setting("admin-user", LIST, [], "admin user (may be given multiple times; if "
                                     "specified, only these users will be able to perform privileged actions; "
                                     "acl-http-header is used to determine the authenticated user)",
                                     key="admin_users", go_field="AdminUsers")
    #: beyond nsqd: no TOML key, so /config never shows it; $NSQ_HTTP_AUTH_SECRET when not given (make_client)
    http_auth_secret: str = setting("http-auth-secret", STRING, "", "secret sent to nsqd and nsqlookupd as "
                                    "'Authorization: Bearer <secret>' (nsqd --http-auth-required; else from "
                                    "$NSQ_HTTP_AUTH_SECRET) (beyond nsqd)", key=None)
    config: str = setting("config", STRING, "", "path to config file", key=None)
    show_version: bool = setting("version", BOOL, False, "print version string", key=None)


class InvalidOptions(Exception):
    """One of Go's `nsqadmin.New()` checks failed; the text is Go's, printed as `failed to instantiate nsqadmin`."""


def parse_options(argv: list[str]) -> AdminOptions:
    """Like nsqadmin's Start(): flags (usage and exit 2 on errors), `--version` returns at once, then TOML.
    ConfigError for an unreadable config file or a bad `log_level`, ResolveError for a TOML value of the wrong
    kind (go.settings)."""
    return parse_daemon_options(AdminOptions(), "nsqadmin", argv, ("log_level",), deprecated_verbose)


def validate(opts: AdminOptions) -> None:
    """Go's `nsqadmin.New()` checks, in its order (the TLS files are read by the HTTP client); normalises
    `base_path` as Go does."""
    if not opts.nsqd_http_addresses and not opts.nsqlookupd_http_addresses:
        raise InvalidOptions("--nsqd-http-address or --lookupd-http-address required")
    if opts.nsqd_http_addresses and opts.nsqlookupd_http_addresses:
        raise InvalidOptions("use --nsqd-http-address or --lookupd-http-address not both")
    if opts.http_client_tls_cert and not opts.http_client_tls_key:
        raise InvalidOptions("--http-client-tls-key must be specified with --http-client-tls-cert")
    if opts.http_client_tls_key and not opts.http_client_tls_cert:
        raise InvalidOptions("--http-client-tls-cert must be specified with --http-client-tls-key")
    for flag, addresses in (("--lookupd-http-address", opts.nsqlookupd_http_addresses),
                            ("--nsqd-http-address", opts.nsqd_http_addresses)):
        for address in addresses:
            _host, sep, port = address.rpartition(":")
            if not sep or not port.isdigit():
                raise InvalidOptions(f"failed to resolve {flag} ({address}) - address {address}: missing port in "
                                     "address")
    if opts.allow_config_from_cidr:
        try:
            ipaddress.ip_network(opts.allow_config_from_cidr, strict=False)
        except ValueError:
            raise InvalidOptions(f"failed to parse --allow-config-from-cidr ({opts.allow_config_from_cidr}) - "
                                 f"invalid CIDR address: {opts.allow_config_from_cidr}") from None
    opts.base_path = normalize_base_path(opts.base_path)


def normalize_base_path(path: str) -> str:
    """Go's normalizeBasePath: rooted and cleaned (`api/` → `/api`, `` → `/`)."""
    if not path:
        return "/"
    return posixpath.normpath(path if path.startswith("/") else "/" + path).replace("//", "/")
