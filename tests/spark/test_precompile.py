"""Spark's Python processes load pyspark as bytecode (`nsq-spark-precompile`, run by `make install`).

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on its Python processes' path, and a zip caches no bytecode: each
process compiled pyspark from source at its start, about a second of CPU for each streaming query."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StringType, StructField, StructType

from nsqd_py.spark.precompile import main, precompile


class PysparkOrigin(DataSource):
    """A data source whose schema, planned in a Python process Spark starts on the driver, names where that process
    loaded pyspark from."""

    @classmethod
    def name(cls) -> str:
        return "pyspark_origin"

    def schema(self) -> StructType:
        import pyspark

        return StructType([StructField(pyspark.__file__ or "", StringType())])


def import_from(archive: Path, module: str) -> list[str]:
    """``module``'s file and its X, imported in a new Python with ``archive`` first on its path, as Spark starts one."""
    env = {**os.environ, "PYTHONPATH": str(archive), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", f"import {module}; print({module}.__file__); print({module}.X)"],
                         env=env, capture_output=True, text=True, check=True, cwd=archive.parent).stdout
    return out.split()


def write_zip(path: Path, files: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(name, text)


def test_spark_loads_pyspark_bytecode_on_the_driver_and_the_executors(spark: SparkSession) -> None:
    """The pip-installed Spark's zip, as `make install` left it, in a planner process and an executor's worker."""
    spark.dataSource.register(PysparkOrigin)
    [planned_in] = spark.read.format("pyspark_origin").load().columns
    [executor] = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
    for origin in (planned_in, executor):
        assert origin.endswith("pyspark.zip/pyspark/__init__.pyc"), origin


def test_a_module_loads_its_bytecode_until_its_source_changes(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    write_zip(archive, {"pkg/__init__.py": "", "pkg/mod.py": "X = 1\n", "pkg/old.py": "print 'python 2'\n",
                        "pkg/data.txt": "kept", "pkg/tests/test_mod.py": "X = 3\n"})
    assert import_from(archive, "pkg.mod") == [f"{archive}/pkg/mod.py", "1"]

    # pkg/__init__ and pkg/mod; old.py does not compile, and tests are not worth a larger directory
    assert precompile(archive) == 2
    assert import_from(archive, "pkg.mod") == [f"{archive}/pkg/mod.pyc", "1"]
    with zipfile.ZipFile(archive) as done:
        assert sorted(done.namelist()) == ["pkg/__init__.py", "pkg/__init__.pyc", "pkg/data.txt", "pkg/mod.py",
                                           "pkg/mod.pyc", "pkg/old.py", "pkg/tests/test_mod.py"]
        assert done.read("pkg/data.txt") == b"kept"
        stale = done.read("pkg/mod.pyc")

    with zipfile.ZipFile(archive, "w") as edited:  # the source edited, the earlier bytecode left beside it
        edited.writestr("pkg/__init__.py", "")
        edited.writestr("pkg/mod.py", "X = 2\n")
        edited.writestr("pkg/mod.pyc", stale)
    assert import_from(archive, "pkg.mod") == [f"{archive}/pkg/mod.py", "2"]  # its hash no longer matches
    assert precompile(archive) == 2
    assert import_from(archive, "pkg.mod") == [f"{archive}/pkg/mod.pyc", "2"]


def test_a_spark_home_without_zips_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=f"no python/lib/\\*.zip under {tmp_path}"):
        main([str(tmp_path)])


def test_a_broken_zip_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    lib = tmp_path / "python" / "lib"
    lib.mkdir(parents=True)
    (lib / "pyspark.zip").write_bytes(b"not a zip")
    with pytest.raises(SystemExit, match=r"cannot rewrite .*pyspark\.zip: File is not a zip file"):
        main([str(tmp_path)])
    assert [p.name for p in lib.iterdir()] == ["pyspark.zip"]  # no temporary file left beside it
    assert (lib / "pyspark.zip").read_bytes() == b"not a zip"
