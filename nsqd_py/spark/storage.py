"""From the write-ahead location a user typed to a pyarrow filesystem, or a clear refusal.

Spark users type Hadoop's URIs (``s3a://bucket/path``, ``wasbs://container@account.blob.core.windows.net/path``),
while pyarrow reads its own spellings: it has no ``s3a`` or ``wasbs``, and reads the container of
``abfs://container@account.blob.core.windows.net/path`` as part of the path. `pyarrow_uri` translates; a scheme
pyarrow has no filesystem for, or whose listings are only eventually consistent (the tasks of a batch agree on each
chunk through listings, chunks.py), is refused by name.

A store pyarrow opens may still lack an operation the chunks need: Arrow's AzureFileSystem cannot move a file on an
account without a hierarchical namespace, a mount may be read-only. `check_location` tries each operation once on a
probe directory when the query starts, so such a store fails the query at once, naming what is missing, instead of
failing every task at its first chunk.

A location may carry credentials (pyarrow's `?secret_key=`, `?sas_token=`, a SAS token's `sig=`, `user:secret@`):
`redact` is the location as it may be shown or stored (the batches' offsets, messages, logs), and `scrub` takes
them out of an error's text, which pyarrow fills with the URI as typed.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from urllib.parse import unquote, unquote_plus, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from .options import OptionError

_S3_SCHEMES = {"s3", "s3a", "s3n"}
_AZURE_SCHEMES = {"abfs", "abfss", "wasb", "wasbs"}
#: read by pyarrow as they are
_KEPT_SCHEMES = {"file", "gs", "gcs", "hdfs", "viewfs"}
#: schemes pyarrow could reach (or might, some day) on which the agreement is unsafe, and why
_UNSAFE_SCHEMES = {
    "swift": "OpenStack Swift updates container listings eventually, so a listing may miss a file written just "
             "before it, and the attempts of a task could then each think their own chunk won",
}
_SUPPORTED = ("a local or shared path, file://, s3:// (or s3a://, s3n://), gs:// (gcs://), hdfs://, viewfs://, "
             "abfs[s]://container@account.dfs.core.windows.net/path, "
             "wasb[s]://container@account.blob.core.windows.net/path")
#: Hadoop's Azure host: ``<account>.dfs.<suffix>`` (ABFS) or ``<account>.blob.<suffix>`` (WASB)
_AZURE_HOST = re.compile(r"(?P<account>[^.@]+)\.(?:dfs|blob)\.(?P<suffix>core\..+)", re.IGNORECASE)
_PUBLIC_CLOUD = "core.windows.net"


class UnsupportedLocationError(OptionError):
    """The write-ahead location is on storage the source cannot publish chunks on."""


#: what stands for a secret in a shown location
REDACTED = "<redacted>"
#: query options whose values are secrets, by a word in their names: pyarrow's access_key, secret_key,
#: session_token, account_key, sas_token, client_secret, access_token, a SAS token's sig, and any like them
_SECRET_NAME = re.compile(r"secret|passw|pwd|token|key|sig|credential|auth", re.IGNORECASE)
#: ``user:password`` at the start of what looks like a path: a password with an unescaped ``/``
_MISTYPED_LOGIN = re.compile(r"[^/:]*:[^/]*[^/\d][^/]*/")


def redact(location: str) -> str:
    """``location`` as it may be shown and stored: the userinfo when it holds a password (and on S3, whose user is
    the access key) and the value of every query option whose name suggests a secret are `REDACTED`; container and
    account names, and paths, stay. The same location with other credentials redacts the same; idempotent."""
    shown, last = [], 0
    for start, end in _secret_spans(location):
        shown += [location[last:start], REDACTED]
        last = end
    return "".join(shown) + location[last:]


def scrub(text: str, location: str) -> str:
    """``text`` (an error's, which may quote the location in any spelling) without the secrets of ``location``: each
    as typed and decoded, and each part of a userinfo (an S3 user is an access key)."""
    secrets: set[str] = set()
    for start, end in _secret_spans(location):
        raw = location[start:end]
        secrets.update(piece for value in (raw, *raw.split(":")) for piece in (value, unquote(value),
                                                                                 unquote_plus(value)))
    for secret in sorted(secrets - {"", REDACTED}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def _secret_spans(location: str) -> list[tuple[int, int]]:
    """Where ``location``'s secrets are: its userinfo (see `redact`) and the values of secret query options."""
    if "://" not in location:
        return []
    scheme = location.partition("://")[0].lower()
    begin = len(scheme) + 3
    query_at = location.find("?", begin)
    end_of_path = len(location) if query_at < 0 else query_at
    spans = []
    at = location.rfind("@", begin, end_of_path)
    if at >= 0:
        login = location[begin:at]
        is_login = "/" not in login or _MISTYPED_LOGIN.match(login) is not None
        if is_login and (":" in login or scheme in _S3_SCHEMES):
            spans.append((begin, at))
    if query_at >= 0:
        position = query_at + 1
        for pair in location[query_at + 1:].split("&"):
            name, equals, _ = pair.partition("=")
            if equals and _SECRET_NAME.search(name):
                spans.append((position + len(name) + 1, position + len(pair)))
            position += len(pair) + 1
    return spans


def resolve_location(location: str) -> str:
    """An absolute location, as the executors must see it: relative paths are taken from the driver's cwd. A URI is
    kept as typed once `pyarrow_uri` accepts it."""
    if "://" in location:
        pyarrow_uri(location)
        return location
    return os.path.abspath(os.path.expanduser(location))


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a resolved location, and the location's path in it."""
    if "://" not in location:
        return pafs.LocalFileSystem(), location
    try:
        return pafs.FileSystem.from_uri(pyarrow_uri(location))
    except (OSError, pa.ArrowException) as error:  # pyarrow's text quotes the URI as typed, secrets and all
        raise UnsupportedLocationError(f"the nsq source cannot open its write-ahead location {redact(location)!r}: "
                                       f"{scrub(str(error), location)}") from None


def pyarrow_uri(location: str) -> str:
    """``location`` (a URI) spelled as pyarrow's `FileSystem.from_uri` reads it, or `UnsupportedLocationError`."""
    scheme = urlsplit(location).scheme.lower()
    rest = location[len(scheme):]
    if scheme in _S3_SCHEMES:
        return f"s3{rest}"
    if scheme in _AZURE_SCHEMES:
        return _azure_uri(location)
    if scheme in _KEPT_SCHEMES:
        return location
    reason = _UNSAFE_SCHEMES.get(scheme, "pyarrow has no filesystem for it")
    raise UnsupportedLocationError(f"writeAheadLocation {redact(location)!r}: {scheme}:// is not supported ({reason}). "
                                   f"Use {_SUPPORTED}")


def _azure_uri(location: str) -> str:
    """Hadoop's ``container@account.dfs|blob.core.windows.net/path`` as pyarrow's ``abfs://`` form with the
    container before the ``@`` (pyarrow reads that form with the dfs host only); pyarrow's own ``abfs[s]://``
    spellings stay. Over HTTPS either way (pyarrow's default; ``?enable_tls=false`` turns it off)."""
    parts = urlsplit(location)
    container, at, host = parts.netloc.rpartition("@")
    azure_host = _AZURE_HOST.fullmatch(host)
    if at and azure_host:
        if azure_host["suffix"].lower() != _PUBLIC_CLOUD:
            raise UnsupportedLocationError(
                f"writeAheadLocation {redact(location)!r}: only Azure's public cloud (*.{_PUBLIC_CLOUD}) is mapped "
                f"from Hadoop's form; for another endpoint use pyarrow's form abfs://account@host:port/container/path")
        query = f"?{parts.query}" if parts.query else ""
        return f"abfs://{container}@{azure_host['account']}.dfs.{_PUBLIC_CLOUD}{parts.path}{query}"
    if parts.scheme.lower() in ("wasb", "wasbs"):
        raise UnsupportedLocationError(
            f"writeAheadLocation {redact(location)!r}: name the container and the account as Hadoop does, "
            f"{parts.scheme}://container@account.blob.{_PUBLIC_CLOUD}/path")
    return location


# -- the probe: can chunks be published there? ------------------------------------------------------------------

#: the locations whose probe passed in this process
_probed: set[str] = set()
_PROBE_CONTENT = b"nsqd_py write-ahead probe\n"


def check_location(location: str,
                   resolve: Callable[[str], tuple[pafs.FileSystem, str]] = filesystem) -> None:
    """Refuse a location on which chunks cannot be published, when the query starts: once per location and process.
    ``resolve`` opens it (slices._filesystem, which tests replace)."""
    if location in _probed:
        return
    try:
        fs, root = resolve(location)
    except (OSError, pa.ArrowException) as error:
        text = scrub(str(error), location)
        raise UnsupportedLocationError(f"the nsq source cannot open its write-ahead location {redact(location)!r}: "
                                       f"{text}") from _unless_secret(error, text)
    probe(fs, root, location)
    _probed.add(location)


def probe(fs: pafs.FileSystem, root: str, location: str) -> None:
    """Do once, in ``LOCATION/_probe-<id>/``, what publishing a chunk does (chunks.py): create a directory, write a
    file, move it to a fresh name (hard-link it on a local path), list the directory, read the file, delete."""
    directory = f"{root.rstrip('/')}/_probe-{uuid.uuid4().hex}"
    temporary, offer = f"{directory}/.offer.tmp", f"{directory}/offer"
    try:
        with _step(fs, location, "create a directory"):
            fs.create_dir(directory, recursive=True)
        with _step(fs, location, "write a file"), fs.open_output_stream(temporary) as out:
            out.write(_PROBE_CONTENT)
        if isinstance(fs, pafs.LocalFileSystem):
            with _step(fs, location, "hard-link a file"):
                os.link(temporary, offer)
                os.unlink(temporary)
        else:
            with _step(fs, location, "move a file to a fresh name"):
                fs.move(temporary, offer)
        with _step(fs, location, "list a directory"):
            listed = [info.base_name for info in fs.get_file_info(pafs.FileSelector(directory))]
        if listed != ["offer"]:
            raise UnsupportedLocationError(_refusal(
                fs, location, "list a directory",
                f"right after the move its listing showed {sorted(listed)}, not ['offer']: listings must show "
                f"every finished write"))
        with _step(fs, location, "read a file"), fs.open_input_stream(offer) as source:
            if source.read() != _PROBE_CONTENT:
                raise OSError(f"{offer} did not read back as written")
    except UnsupportedLocationError:
        with suppress(OSError, pa.ArrowException):
            fs.delete_dir(directory)
        raise
    with _step(fs, location, "delete a directory"):
        fs.delete_dir(directory)


@contextmanager
def _step(fs: pafs.FileSystem, location: str, operation: str) -> Iterator[None]:
    try:
        yield
    except (OSError, pa.ArrowException) as error:
        text = scrub(str(error), location)
        raise UnsupportedLocationError(_refusal(fs, location, operation, text)) from _unless_secret(error, text)


def _unless_secret(error: BaseException, scrubbed: str) -> BaseException | None:
    """``error`` to chain to ours, or None when its text held a secret (a traceback prints what is chained)."""
    return error if scrubbed == str(error) else None


def _refusal(fs: pafs.FileSystem, location: str, operation: str, error: str) -> str:
    message = (f"the nsq source cannot publish chunks in its write-ahead location {redact(location)!r} (pyarrow's "
               f"{fs.type_name} filesystem): it could not {operation}: {error}. Every chunk needs to create a "
               f"directory, write, move (or hard-link on a local path), list, read and delete files there, from "
               f"the driver and every executor")
    if "hierarchical namespace" in error.lower():
        message += (". Arrow's AzureFileSystem cannot move files on an Azure account without a hierarchical "
                    "namespace: use an account with it enabled (Data Lake Storage Gen2), or another store")
    return message
