"""Storage URIs users type (issue 38, case 12): Hadoop's spellings of S3 and Azure mapped to what pyarrow reads,
stores the chunks cannot work on refused when the query starts, never at every chunk.

No network reaches S3, Azure or GCS here, so the mapping is tested as pure functions: the URI pyarrow reads, and
the filesystem and path pyarrow opens for it (opening one sends no request). The probe's refusals run against
pyarrow `PyFileSystem`s over a local directory that fail as the real stores do: Arrow's own error for a move on an
Azure account without a hierarchical namespace, a read-only mount's errno, a listing that lags behind writes."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import NoReturn

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from nsqd_py.spark import slices
from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.reader import NSQStreamReader
from nsqd_py.spark.storage import UnsupportedLocationError, pyarrow_uri
from tests.spark.stores import LocalStore
from tests.spark.util import source_options
from tests.support import NsqdProcess

#: what Arrow's AzureFileSystem::Move answers on an account without a hierarchical namespace (azurefs.cc)
FLAT_NAMESPACE_MOVE = ("FileSystem::Move() is not implemented for Azure Storage accounts without Hierarchical "
                       "Namespace support (see arrow/issues/40405).")


def reader_at(nsqd: NsqdProcess, location: str) -> NSQStreamReader:
    """Build the reader as Spark does when the query starts (nothing connects to nsqd yet)."""
    return NSQStreamReader(ReadOptions.parse(source_options(nsqd, "t", writeAheadLocation=location)))


# -- the spellings -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("typed", "read_by_pyarrow"), [
    ("s3a://bucket/wa", "s3://bucket/wa"),
    ("s3n://bucket/wa", "s3://bucket/wa"),
    ("s3a://bucket/wa?region=eu-west-1&endpoint_override=minio:9000&scheme=http",
     "s3://bucket/wa?region=eu-west-1&endpoint_override=minio:9000&scheme=http"),
    ("s3://bucket/wa", "s3://bucket/wa"),
    ("abfss://lake@acct.dfs.core.windows.net/wa", "abfs://lake@acct.dfs.core.windows.net/wa"),
    ("abfs://lake@acct.dfs.core.windows.net/wa", "abfs://lake@acct.dfs.core.windows.net/wa"),
    ("wasbs://lake@acct.blob.core.windows.net/wa", "abfs://lake@acct.dfs.core.windows.net/wa"),
    ("wasb://lake@acct.blob.core.windows.net/wa", "abfs://lake@acct.dfs.core.windows.net/wa"),
    ("abfs://lake@acct.blob.core.windows.net/wa", "abfs://lake@acct.dfs.core.windows.net/wa"),
    ("abfss://lake@acct.dfs.core.windows.net/wa?sv=2024-11-04&sp=rwdl&sig=c2ln",
     "abfs://lake@acct.dfs.core.windows.net/wa?sv=2024-11-04&sp=rwdl&sig=c2ln"),
    ("abfs://acct.dfs.core.windows.net/lake/wa", "abfs://acct.dfs.core.windows.net/lake/wa"),
    ("abfs://devstoreaccount1@127.0.0.1:10000/lake/wa", "abfs://devstoreaccount1@127.0.0.1:10000/lake/wa"),
    ("gs://bucket/wa", "gs://bucket/wa"),
    ("gcs://bucket/wa", "gcs://bucket/wa"),
    ("hdfs://namenode:8020/wa", "hdfs://namenode:8020/wa"),
    ("viewfs://cluster/wa", "viewfs://cluster/wa"),
    ("file:///data/wa", "file:///data/wa"),
])
def test_hadoop_spellings_become_what_pyarrow_reads(typed: str, read_by_pyarrow: str) -> None:
    """Before: every URI went to pyarrow as typed; s3a, s3n, wasb and wasbs failed at the first trigger with
    pyarrow's "Unrecognized filesystem type". After: Hadoop's spellings become pyarrow's, queries pass through, and
    pyarrow's own spellings (Azurite's included) stay."""
    assert pyarrow_uri(typed) == read_by_pyarrow


@pytest.mark.parametrize(("typed", "opened", "path"), [
    ("s3a://bucket/wa?region=eu-west-1&endpoint_override=minio.local:9000&scheme=http",
     pafs.S3FileSystem(region="eu-west-1", endpoint_override="minio.local:9000", scheme="http"), "bucket/wa"),
    ("s3n://bucket/wa?region=us-east-2", pafs.S3FileSystem(region="us-east-2"), "bucket/wa"),
    ("wasbs://lake@acct.blob.core.windows.net/wa", pafs.AzureFileSystem(account_name="acct"), "lake/wa"),
    ("abfss://lake@acct.dfs.core.windows.net/wa", pafs.AzureFileSystem(account_name="acct"), "lake/wa"),
    ("abfs://lake@acct.blob.core.windows.net/wa", pafs.AzureFileSystem(account_name="acct"), "lake/wa"),
    ("file:///data/wa", pafs.LocalFileSystem(), "/data/wa"),
])
def test_user_uris_open_the_filesystem_and_path_they_name(typed: str, opened: pafs.FileSystem, path: str) -> None:
    """Before: s3a/s3n/wasbs raised ArrowInvalid, and ``abfs://lake@acct.blob.core.windows.net/wa`` opened the path
    ``wa``: pyarrow reads the container before the ``@`` only with the dfs host, so chunks went to a container named
    ``wa``. After: the account, the region and endpoint, and the container as the path's start."""
    fs, root = slices._filesystem(typed)
    assert fs.equals(opened)
    assert root == path


def test_gcs_opens_a_gcs_filesystem() -> None:
    fs, root = slices._filesystem("gs://bucket/wa")
    assert isinstance(fs, pafs.GcsFileSystem)
    assert root == "bucket/wa"


@pytest.mark.parametrize(("typed", "reason"), [
    ("swift://container/wa", "listings eventually"),
    ("oss://bucket/wa", "pyarrow has no filesystem"),
    ("adl://acct.azuredatalakestore.net/wa", "pyarrow has no filesystem"),
    ("az://lake/wa", "pyarrow has no filesystem"),
])
def test_schemes_pyarrow_lacks_or_whose_listings_lag_are_refused_when_the_query_starts(
        nsqd: NsqdProcess, typed: str, reason: str) -> None:
    """Before: the reader started; the first trigger failed with pyarrow's "Unrecognized filesystem type in URI"
    (swift:// included, with no word on its listings). After: the reader refuses, naming the scheme, why, and the
    spellings that work."""
    with pytest.raises(UnsupportedLocationError, match=reason) as refused:
        reader_at(nsqd, typed)
    message = str(refused.value)
    assert typed in message and f"{typed.split(':')[0]}://" in message
    assert "s3a://" in message and "wasb[s]://container@account.blob.core.windows.net" in message


@pytest.mark.parametrize(("typed", "what_to_do"), [
    ("wasbs://acct.blob.core.windows.net/wa", "wasbs://container@account.blob.core.windows.net/path"),
    ("abfss://lake@acct.dfs.core.chinacloudapi.cn/wa", "abfs://account@host:port/container/path"),
])
def test_azure_uris_pyarrow_would_misread_are_refused(nsqd: NsqdProcess, typed: str, what_to_do: str) -> None:
    """Before: wasbs failed as an unknown scheme; Hadoop's form on another Azure cloud reached pyarrow, which took
    the container ``lake`` for the account, the host for an emulator's and ``wa`` for the container. After: refused
    when the query starts, saying what to type."""
    with pytest.raises(UnsupportedLocationError, match=what_to_do.replace("[", r"\[")):
        reader_at(nsqd, typed)


# -- the probe -----------------------------------------------------------------------------------------------------

class _LocalStore(LocalStore):
    """The plain store; subclasses fail what a real store fails. ``probes`` counts the probe directories created."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.probes = 0

    def create_dir(self, path: str, recursive: bool) -> None:
        self.probes += "/_probe-" in path
        super().create_dir(path, recursive)


class _FlatNamespaceAzure(_LocalStore):
    """Arrow's AzureFileSystem on an account without a hierarchical namespace: everything works but a move."""

    def move(self, src: str, dest: str) -> None:
        raise pa.ArrowNotImplementedError(FLAT_NAMESPACE_MOVE)


class _ReadOnlyMount(_LocalStore):
    """A read-only mount (EROFS) or a directory this user may not write (EACCES): mkdir, open for writing, rename
    and unlink fail with the errno the kernel gives."""

    def __init__(self, root: Path, code: int) -> None:
        super().__init__(root)
        self.code = code

    def _refuse(self, path: str) -> NoReturn:
        raise OSError(self.code, "Read-only file system" if self.code == errno.EROFS else "Permission denied", path)

    def create_dir(self, path: str, recursive: bool) -> None:
        self._refuse(path)

    def open_output_stream(self, path: str, metadata: dict) -> pa.NativeFile:
        self._refuse(path)

    def move(self, src: str, dest: str) -> None:
        self._refuse(src)

    def delete_dir(self, path: str) -> None:
        self._refuse(path)


class _LaggingListings(_LocalStore):
    """Listings as OpenStack Swift documents them: a file written or moved since the directory's last listing may be
    missing from the next one (here it always is)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.unlisted: set[str] = set()

    def open_output_stream(self, path: str, metadata: dict) -> pa.NativeFile:
        self.unlisted.add(path.lstrip("/"))
        return super().open_output_stream(path, metadata)

    def move(self, src: str, dest: str) -> None:
        self.unlisted.add(dest.lstrip("/"))
        super().move(src, dest)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        infos = super().get_file_info_selector(selector)
        listed = [info for info in infos if info.path.lstrip("/") not in self.unlisted]
        self.unlisted.clear()
        return listed


@pytest.fixture
def store_for(monkeypatch: pytest.MonkeyPatch) -> dict[str, _LocalStore]:
    """Locations put here open their handler's filesystem (slices._filesystem, as the source opens every location);
    any other location opens as usual."""
    stores: dict[str, _LocalStore] = {}
    real = slices._filesystem

    def resolve(location: str) -> tuple[pafs.FileSystem, str]:
        if location in stores:
            return pafs.PyFileSystem(stores[location]), "/"
        return real(location)

    monkeypatch.setattr(slices, "_filesystem", resolve)
    return stores


def probe_dirs(root: Path) -> list[str]:
    return [path.name for path in root.iterdir() if path.name.startswith("_probe-")]


def test_the_fake_azure_fails_moves_with_the_installed_arrows_own_error() -> None:
    """The premise of the next test: Arrow's AzureFileSystem answers a move on a flat namespace with this text."""
    [library] = Path(pa.__file__).parent.glob("libarrow.*")
    assert FLAT_NAMESPACE_MOVE.encode() in library.read_bytes()


def test_an_azure_account_without_hierarchical_namespace_is_refused_when_the_query_starts(
        nsqd: NsqdProcess, tmp_path: Path, store_for: dict[str, _LocalStore]) -> None:
    """Before: the reader started and planned batch 1; every task then failed at its first chunk
    (AgreedChunks.publish moves its offer into place), and so did every retry until the query failed, while the
    messages the tasks had taken stayed in flight until msgTimeout. After: the reader refuses at once, naming the
    location, the filesystem, the missing move and what to use; the probe directory is removed."""
    location = f"abfss://lake@acct.dfs.core.windows.net/{tmp_path.name}"
    store_for[location] = _FlatNamespaceAzure(tmp_path)
    with pytest.raises(UnsupportedLocationError) as refused:
        reader_at(nsqd, location)
    message = str(refused.value)
    assert location in message and "_FlatNamespaceAzure" in message  # the filesystem, by its type name
    assert "could not move a file to a fresh name" in message and FLAT_NAMESPACE_MOVE in message
    assert "use an account with it enabled (Data Lake Storage Gen2)" in message
    assert probe_dirs(tmp_path) == []


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_read_only_location_is_refused_when_the_query_starts(
        nsqd: NsqdProcess, tmp_path: Path, store_for: dict[str, _LocalStore], code: int) -> None:
    """Before: the reader started and the first trigger failed in planning with the bare OSError of a mkdir. After:
    the reader refuses, naming the location and the first operation that failed."""
    location = str(tmp_path)
    store_for[location] = _ReadOnlyMount(tmp_path, code)
    with pytest.raises(UnsupportedLocationError, match="could not create a directory") as refused:
        reader_at(nsqd, location)
    assert location in str(refused.value) and f"[Errno {code}]" in str(refused.value)


def test_a_listing_that_misses_a_finished_write_is_refused(
        nsqd: NsqdProcess, tmp_path: Path, store_for: dict[str, _LocalStore]) -> None:
    """Before: nothing looked; the attempts of a task would each have seen only their own round files and could
    both have won a chunk. After: a lagging listing seen by the probe refuses the query (one right listing proves
    nothing, hence swift:// is refused by its scheme)."""
    location = str(tmp_path)
    store_for[location] = _LaggingListings(tmp_path)
    with pytest.raises(UnsupportedLocationError, match=r"listing showed \[\], not \['offer'\]"):
        reader_at(nsqd, location)
    assert probe_dirs(tmp_path) == []


def test_the_probe_runs_once_per_location_and_leaves_nothing(
        nsqd: NsqdProcess, tmp_path: Path, store_for: dict[str, _LocalStore]) -> None:
    """Before: no probe. After: the first reader of a location probes it, later readers of it in the process do
    not, and the probe directory is gone afterwards."""
    location = str(tmp_path)
    store = store_for[location] = _LocalStore(tmp_path)
    reader_at(nsqd, location)
    reader_at(nsqd, location)
    assert store.probes == 1
    assert list(tmp_path.iterdir()) == []


def test_a_local_location_is_probed_with_the_hard_link_its_chunks_use(nsqd: NsqdProcess, tmp_path: Path) -> None:
    """The real local filesystem passes (link, not move, is what LinkedChunks needs), and keeps nothing of it."""
    location = tmp_path / "wa"
    reader_at(nsqd, str(location))
    assert list(location.iterdir()) == []
