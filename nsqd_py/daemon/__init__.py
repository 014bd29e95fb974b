"""The nsqd process around the broker: start-up and shutdown (program, service), gevent's patching, systemd
notification and gunicorn support. Nothing in nsqd_py imports it but the executables."""
