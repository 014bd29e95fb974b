"""Running the whole nsqd (TCP, HTTP API, core) inside one gunicorn gevent worker; see configs/gunicorn.conf.py.

nsqd's flags and TOML come from the environment, since gunicorn's command line takes only its own flags:
``NSQD_ARGS`` holds nsqd flags, split like a shell would (``--data-path=/var/lib/nsqd --tcp-address=...``), and
``NSQD_CONFIG=path`` is short for a leading ``--config=path``. The gunicorn master parses them (to bind the HTTP
socket to ``--http-address`` and to reject bad flags before forking); the worker builds nsqd from the result.

In the worker the program is NSQDProgram without an HTTP listener of its own (its HTTPS listener, with TLS
configured, stays): gunicorn accepts HTTP and calls `application`, the Falcon app of nsqd's API. SIGTERM, SIGINT
and SIGQUIT all stop nsqd gracefully, as they do the plain `nsqd`: TCP listener and clients closed, everything
flushed to disk, while gunicorn stops accepting HTTP and finishes the requests in progress (a /pub that reaches
the exiting nsqd gets 503 EXITING, never a lost OK). gunicorn's own SIGINT/SIGQUIT handling would exit the
worker at once, and the master's follow-up SIGQUIT on Ctrl-C would cut the flush short. The flush starts at
once instead of after gunicorn's HTTP drain, so a slow HTTP client cannot use up the master's
`graceful_timeout`, after which it SIGKILLs the worker.

Only this module and the options are imported by gunicorn's master; everything else loads in the worker after
gunicorn's gevent monkey-patching (as `apps/nsqd.py` patches before importing nsqd).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import gevent
from gunicorn.arbiter import Arbiter
from gunicorn.workers.ggevent import GeventWorker

from ..config.options import Options, options_or_exit
from ..runtime.listen import is_unix_address, port_of
from ..runtime.log import Logger

if TYPE_CHECKING:
    from gunicorn.workers.base import Worker

    from .program import NSQDProgram

#: signals that stop the worker; all three are nsqd's graceful stop
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


def options_from_env(environ: Mapping[str, str] = os.environ) -> Options:
    """nsqd's options from ``NSQD_CONFIG`` and ``NSQD_ARGS``. Bad flags or config end the process with nsqd's
    message and exit status; ``--version`` prints nsqd's version line and exits 0."""
    argv = shlex.split(environ.get("NSQD_ARGS", ""))
    if environ.get("NSQD_CONFIG"):
        argv = [f"--config={environ['NSQD_CONFIG']}", *argv]
    opts = options_or_exit(argv)
    if not opts.http_address:
        Logger().fatal("failed to instantiate nsqd - gunicorn serves the HTTP API: --http-address must be set")
        sys.exit(1)
    return opts


def bind_address(http_address: str) -> str:
    """gunicorn's spelling of nsqd's ``--http-address``: a unix socket path gets the ``unix:`` prefix.

    `0.0.0.0:4151` stays IPv4-only under gunicorn (nsqd listens dual-stack there); `[::]:4151` is dual-stack.
    """
    return f"unix:{http_address}" if is_unix_address(http_address) else http_address


def check_server(server: Arbiter) -> None:
    """gunicorn's `on_starting`: nsqd's state lives in one process and it locks its data dir, so exactly one
    gevent worker; refuse anything else before binding a socket."""
    if server.num_workers != 1:
        sys.exit(f"nsqd under gunicorn runs in exactly one worker (workers = 1), not {server.num_workers}")
    if not issubclass(server.worker_class, GeventWorker):
        sys.exit(f"nsqd under gunicorn needs the gevent worker class, not {server.cfg.worker_class_str}")


class NSQDApplication:
    """The WSGI app gunicorn serves: nsqd's HTTP API, once `start` has built nsqd in the worker."""

    def __init__(self) -> None:
        self._app: Callable[..., Iterable[bytes]] | None = None
        self._program: NSQDProgram | None = None
        self._stopping: gevent.Greenlet | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if self._app is None:  # gunicorn serves a worker's requests only after post_worker_init
            raise RuntimeError("nsqd has not started in this worker")
        return self._app(environ, start_response)

    def start(self, opts: Options, worker: Worker) -> None:
        """gunicorn's `post_worker_init`: init and start nsqd as NSQDProgram does, reporting gunicorn's HTTP port.

        A startup failure (data dir locked, TCP address in use, ...) exits with gunicorn's boot-error status, so
        the master shuts down instead of respawning the worker forever.
        """
        # the worker's imports, after gunicorn's monkey-patching (see the module docstring)
        from ..core.nsqd import StartupError
        from ..http_api.app import create_app
        from .program import NSQDProgram

        logger = Logger(opts.log_prefix, opts.log_level)
        program = NSQDProgram(opts, logger, external_http_port=port_of(worker.sockets[0]))
        try:
            program.init()
        except StartupError as err:
            logger.fatal(f"failed to instantiate nsqd - {err}")
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
        self._app = create_app(program.ctx)
        program.start()
        self._program = program

        def on_stop_signal(_sig: int, _frame: object) -> None:
            worker.alive = False  # gunicorn: stop accepting HTTP, finish the requests in progress, exit
            self._begin_stop()

        for sig in _STOP_SIGNALS:
            signal.signal(sig, on_stop_signal)
        gevent.spawn(self._stop_gunicorn_when_asked, program, worker)

    @staticmethod
    def _stop_gunicorn_when_asked(program: NSQDProgram, worker: Worker) -> None:
        """PUT /config/shutdown, or the end of a drain (PUT /config/drain): nsqd asks to stop, so the master is told
        to stop as a SIGTERM would, and it stops this worker (a worker that just exited would be booted again)."""
        program.nsqd.stop_requested.wait()
        os.kill(worker.ppid, signal.SIGTERM)

    def stop(self) -> None:
        """gunicorn's `worker_exit`: wait until nsqd has stopped and flushed (starting that if no signal did).
        A no-op in the master, which calls the hook too when it reaps a worker."""
        if self._program is not None:
            self._begin_stop().get()

    def _begin_stop(self) -> gevent.Greenlet:
        if self._stopping is None:
            if self._program is None:
                raise RuntimeError("nsqd has not started in this worker")
            self._stopping = gevent.spawn(self._program.stop)
        return self._stopping


#: the `wsgi_app` of configs/gunicorn.conf.py
application = NSQDApplication()
