"""Write-ahead locations over a local directory behind pyarrow's PyFileSystem: not a LocalFileSystem, so chunks are
won by the agreement over moves that replace their target, as on an object store. Tests subclass `LocalStore` to
fail what a real store fails, and `use_store` makes a location URI resolve to one."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from nsqd_py.spark import slices


class LocalStore(pafs.FileSystemHandler):
    """Every call passes to a SubTreeFileSystem over ``root``."""

    def __init__(self, root: Path) -> None:
        self.inner = pafs.SubTreeFileSystem(str(root), pafs.LocalFileSystem())

    def get_type_name(self) -> str:
        return type(self).__name__

    def normalize_path(self, path: str) -> str:
        return self.inner.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.inner.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        self.inner.delete_dir_contents("/")

    def delete_file(self, path: str) -> None:
        self.inner.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.inner.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.inner.copy_file(src, dest)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.inner.open_input_stream(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.inner.open_input_file(path)

    def open_output_stream(self, path: str, metadata: dict) -> pa.NativeFile:
        return self.inner.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: dict) -> pa.NativeFile:
        return self.inner.open_append_stream(path, metadata=metadata)


def use_store(monkeypatch: pytest.MonkeyPatch, scheme: str, store: LocalStore) -> None:
    """Locations `<scheme>://<path>` resolve to ``store`` (its `/<path>`); every other location as usual."""
    real = slices._filesystem
    filesystem = pafs.PyFileSystem(store)

    def resolve(location: str) -> tuple[pafs.FileSystem, str]:
        if location.startswith(f"{scheme}://"):
            return filesystem, "/" + location.removeprefix(f"{scheme}://")
        return real(location)

    monkeypatch.setattr(slices, "_filesystem", resolve)
