"""gunicorn config that runs the whole nsqd (TCP, HTTP API, core) in one gevent worker.

    NSQD_CONFIG=/etc/nsqd/nsqd.toml NSQD_ARGS='--data-path=/var/lib/nsqd' gunicorn -c configs/gunicorn.conf.py

nsqd's flags go in NSQD_ARGS (shell-split) and NSQD_CONFIG (a TOML file, like --config); gunicorn binds nsqd's
--http-address, so leave out gunicorn's -b. Keep one gevent worker. See nsqd_py/daemon/gunicorn_support.py.
"""

from nsqd_py.daemon import gunicorn_support

nsqd_options = gunicorn_support.options_from_env()

wsgi_app = "nsqd_py.daemon.gunicorn_support:application"
bind = [gunicorn_support.bind_address(nsqd_options.http_address)]
# nsqd's topics, channels and clients live in one process, which locks the data dir: one worker, never more.
# SIGHUP, SIGUSR2, SIGTTIN and max_requests start a worker while another may still hold the data dir; when it
# does, the new one fails to boot and gunicorn shuts down (gracefully). Restart instead.
workers = 1
worker_class = "gevent"
# the master SIGKILLs a worker still running this long after SIGTERM: give nsqd's flush to disk time (under
# systemd keep TimeoutStopSec above it)
graceful_timeout = 120
# gunicorn's control socket (gunicornc) can add workers and reload, which nsqd cannot do
control_socket_disable = True


def on_starting(server):
    gunicorn_support.check_server(server)


def post_worker_init(worker):
    gunicorn_support.application.start(nsqd_options, worker)


def worker_exit(server, worker):
    gunicorn_support.application.stop()
