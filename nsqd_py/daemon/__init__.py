"""The nsqd daemon around the broker: options, start-up and shutdown (program, service), what the front doors
share (context), TLS, systemd notification and gunicorn support."""
