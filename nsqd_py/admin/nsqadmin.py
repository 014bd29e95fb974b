"""The nsqadmin program: options checked, the HTTP client, the API and the notifier (Go's nsqadmin.New/Main/
Exit)."""

from __future__ import annotations

from ..go.durations import SECOND
from ..http_server.server import WSGIServer
from ..runtime.listen import ListenError, display_address, listen, port_of
from ..runtime.log import Logger
from ..runtime.version import version_line
from ..wire.http_auth import secret_or_env
from .clusterinfo import ClusterInfo
from .graphite_proxy import graphite_proxy
from .http_api import create_app
from .notify import Notifier
from .options import AdminOptions, InvalidOptions, validate
from .upstream import Client
from .views import Views


class AdminStartupError(Exception):
    """A bad option or the listener could not be opened; the text is Go's."""


def make_client(opts: AdminOptions) -> Client:
    """The HTTP client of --http-client-*: timeouts and TLS (a CA file, a client certificate, or no checks)."""
    verify: bool | str = opts.http_client_tls_root_ca_file or True
    if opts.http_client_tls_insecure_skip_verify:
        verify = False
    cert = (opts.http_client_tls_cert, opts.http_client_tls_key) if opts.http_client_tls_cert else None
    return Client(opts.http_client_connect_timeout / SECOND, opts.http_client_request_timeout / SECOND,
                  verify=verify, cert=cert, auth_secret=secret_or_env(opts.http_auth_secret))


class NSQAdmin:
    def __init__(self, opts: AdminOptions, logger: Logger) -> None:
        self.opts = opts
        self.logger = logger
        self._http: WSGIServer | None = None
        self._address = ""
        self.http_port = 0
        self.notifier: Notifier | None = None

    def init(self) -> None:
        """Check the options, log the version, listen; AdminStartupError (Go's text) on failure."""
        try:
            validate(self.opts)
        except InvalidOptions as err:
            raise AdminStartupError(str(err)) from None
        self.logger.info(version_line("nsqadmin"))
        try:
            sock = listen(self.opts.http_address)
        except ListenError as err:
            raise AdminStartupError(str(err)) from None
        self._address = display_address(sock)
        self.http_port = port_of(sock)
        client = make_client(self.opts)
        self.notifier = Notifier(self.opts.notification_http_endpoint, client, self.logger)
        views = Views(self.opts, ClusterInfo(client, self.logger), self.logger)
        app = create_app(views, self.notifier)
        if self.opts.proxy_graphite:
            self._http = WSGIServer(sock, graphite_proxy(app, self.opts.graphite_url, self.opts.base_path,
                                                         client.timeout))
        else:
            self._http = WSGIServer(sock, app)

    def start(self) -> None:
        if self.notifier is not None:
            self.notifier.start()
        if self._http is not None:
            self.logger.info(f"HTTP: listening on {self._address}")
            self._http.start()

    def stop(self) -> None:
        if self._http is not None:
            self.logger.info(f"HTTP: closing {self._address}")
            self._http.stop(timeout=1)
        if self.notifier is not None:
            self.notifier.stop(timeout=self.opts.http_client_request_timeout / SECOND)
