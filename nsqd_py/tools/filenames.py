"""nsq_to_file's output file names: `--filename-format` with <TOPIC>, <HOST>, <PID>, <DATETIME> and <REV>."""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time

from .strftime import has_subseconds, strftime

#: per thread: the last (template, format, second) rendered and its result
_last: dict[int, tuple[tuple[str, str, int], str]] = {}

MISSING_REV = "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"


def filename_template(filename_format: str, topic: str, *, host_identifier: str = "", gzip: bool = False,
                      needs_rev: bool = False, hostname: str | None = None, pid: int | None = None) -> str:
    """Fill in everything but <DATETIME> and <REV> (computeFilenameFormat). ``needs_rev`` is true with
    rotation or a separate work dir (gzip implies it); <REV> is then mandatory, otherwise it is dropped."""
    hostname = socket.gethostname() if hostname is None else hostname
    short_host = hostname.split(".")[0]
    identifier = short_host
    if host_identifier:
        identifier = host_identifier.replace("<SHORT_HOST>", short_host).replace("<HOSTNAME>", hostname)
    name = filename_format
    if gzip or needs_rev:
        if "<REV>" not in name:
            raise ValueError(MISSING_REV)
    else:
        name = name.replace("<REV>", "")
    name = name.replace("<TOPIC>", topic).replace("<HOST>", identifier)
    name = name.replace("<PID>", str(os.getpid() if pid is None else pid))
    if gzip and not name.endswith(".gz"):
        name += ".gz"
    return name


def current_filename(template: str, datetime_format: str) -> str:
    """The template with <DATETIME> rendered for now (local time); nsq_to_file asks for every message, so a
    rendering is reused within the same second unless the format shows fractions of a second."""
    now = time.time()
    key = (template, datetime_format, int(now))
    cached = _last.get(threading.get_ident())
    if cached is not None and cached[0] == key:
        return cached[1]
    name = template.replace("<DATETIME>", strftime(datetime_format, dt.datetime.fromtimestamp(now).astimezone()))
    if not has_subseconds(datetime_format):
        _last[threading.get_ident()] = (key, name)
    return name


def with_rev(name: str, rev: int) -> str:
    """<REV> as `-%06d`."""
    return name.replace("<REV>", f"-{rev:06d}")
