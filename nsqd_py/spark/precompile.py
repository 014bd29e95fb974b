"""Bytecode for the zips that Spark puts first on the path of its Python processes (`nsq-spark-precompile`).

Spark starts its Python processes (on the driver, one per streaming query that reads a Python data source, and one
per schema or plan lookup; on each executor, the worker daemon) with `$SPARK_HOME/python/lib/pyspark.zip` first on
PYTHONPATH. The zip holds sources only, and zipimport caches no bytecode, so every one of those processes compiles
pyspark before it runs anything: about a second of CPU, paid by each streaming query at its start
(docs/benchmarks.md). With a `.pyc` beside each `.py` in the zip (not in its `tests/` packages), zipimport loads
that instead. The bytecode is checked against its source's hash on import, so a zip edited later still imports its
sources; a Python of another version ignores it (another magic number) and compiles as before.
"""

from __future__ import annotations

import argparse
import importlib.util
import marshal
import os
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

#: a hash-based pyc whose source is checked on import (PEP 552)
_CHECKED_HASH = 0b11


def pyc_bytes(source: bytes, name: str) -> bytes:
    """The pyc of ``source`` (``name``: its path in tracebacks) as zipimport reads it."""
    with warnings.catch_warnings():  # a module's own SyntaxWarnings are for its authors
        warnings.simplefilter("ignore")
        code = compile(source, name, "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + _CHECKED_HASH.to_bytes(4, "little") + importlib.util.source_hash(source)
    return header + marshal.dumps(code)


def precompile(zip_path: Path) -> int:
    """Rewrite ``zip_path`` with the bytecode of each of its modules beside it (atomically); the modules compiled.
    A module that does not compile (a Python 2 leftover) keeps its source alone, and so do test modules: every
    Python process Spark starts reads the zip's directory, twice, in pure Python."""
    fd, tmp = tempfile.mkstemp(dir=zip_path.parent, prefix=f".{zip_path.name}.")
    try:
        with zipfile.ZipFile(zip_path) as old, os.fdopen(fd, "wb") as out, \
                zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as new:
            compiled = _copy_with_bytecode(old, new, zip_path)
        os.chmod(tmp, zip_path.stat().st_mode)
        os.replace(tmp, zip_path)
    except BaseException:
        os.unlink(tmp)
        raise
    return compiled


def _copy_with_bytecode(old: zipfile.ZipFile, new: zipfile.ZipFile, zip_path: Path) -> int:
    compiled = 0
    for info in old.infolist():
        if info.filename.endswith(".pyc"):
            continue  # an earlier run's, made again below
        data = old.read(info)
        new.writestr(info, data)
        if not info.filename.endswith(".py") or "/tests/" in info.filename:
            continue  # pyspark's own tests (930 of its 1286 modules) would double the zip's directory
        try:
            pyc = pyc_bytes(data, os.path.join(zip_path, info.filename))  # as zipimport names it
        except SyntaxError:
            continue
        new.writestr(zipfile.ZipInfo(info.filename + "c", info.date_time), pyc, zipfile.ZIP_DEFLATED)
        compiled += 1
    return compiled


def spark_zips(spark_home: Path) -> list[Path]:
    """The zips Spark puts on its Python processes' path from ``spark_home``."""
    return sorted((spark_home / "python" / "lib").glob("*.zip"))


def installed_spark_home() -> Path:
    """The Spark that pip's pyspark carries (its own SPARK_HOME)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SystemExit("nsq-spark-precompile: pyspark is not installed; name a SPARK_HOME")
    return Path(spec.origin).parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nsq-spark-precompile", description=__doc__.split("\n")[0])
    parser.add_argument("spark_home", nargs="*", type=Path,
                        help="SPARK_HOME directories (default: the one inside the installed pyspark)")
    homes = parser.parse_args(argv).spark_home or [installed_spark_home()]
    for home in homes:
        zips = spark_zips(home)
        if not zips:
            raise SystemExit(f"nsq-spark-precompile: no python/lib/*.zip under {home}")
        for path in zips:
            try:
                count = precompile(path)
            except (OSError, zipfile.BadZipFile) as err:
                raise SystemExit(f"nsq-spark-precompile: cannot rewrite {path}: {err}") from err
            print(f"{path}: bytecode for {count} modules", file=sys.stderr)


if __name__ == "__main__":
    main()
