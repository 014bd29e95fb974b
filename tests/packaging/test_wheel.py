"""The distributable package as a user gets it: `make dist`'s wheel installed into a fresh venv outside the
checkout, then `nsqd --version`, a publish and consume, and the pytest plugin from a throwaway project.

The wheel is built once per session (mypyc compiles it where a C compiler is present: under a minute with ccache); the
venv's dependencies come from the package index as a user's would (pip's cache makes that quick).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import requests

from nsqd_py.runtime.version import NSQ_VERSION
from nsqd_py.testing import free_port
from tests.packaging.test_build import _have_compiler
from tests.support import RawConn, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.process]

ROOT = Path(__file__).resolve().parents[2]

PROJECT_TEST = '''
def test_roundtrip(nsqd):
    nsqd.publish("events", b"hello")
    assert nsqd.consume("events", "test", 1) == [b"hello"]
'''


def _run(*args: str | Path, cwd: Path, timeout: float = 600,
         extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A command with the environment of a fresh shell: nothing of this checkout or this pytest leaks in."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYTEST_", "PYTHON", "NSQD_PY_", "VIRTUAL_ENV"))}
    env.update(extra_env or {})
    result = subprocess.run([str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make dist`'s sdist and wheel, built into a temporary directory (the checkout's dist/ is left alone)."""
    out = tmp_path_factory.mktemp("dist")
    # the Makefile compiles through ccache where it is installed (`make test` installs it): the objects of the
    # install's compile come back, and only mypyc's own work is left
    _run("make", "-s", f"DIST={out}", "dist", cwd=ROOT, timeout=900)
    return out


@pytest.fixture(scope="session")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only the wheel (and pytest, for the plugin) installed: its bin/ directory."""
    home = tmp_path_factory.mktemp("user")
    venv.create(home / "venv", with_pip=True)
    bin_dir = home / "venv" / "bin"
    (wheel,) = dist.glob("nsqd_py-*.whl")
    _run(bin_dir / "pip", "install", "-q", "--disable-pip-version-check", wheel, "pytest", cwd=home)
    return bin_dir


@pytest.fixture
def project(installed: Path) -> Path:
    """A throwaway project directory beside the venv, far from this checkout."""
    path = installed.parent.parent / "project"
    path.mkdir(exist_ok=True)
    return path


def test_make_dist_builds_an_sdist_and_a_wheel(dist: Path) -> None:
    names = sorted(path.name for path in dist.iterdir())
    assert len(names) == 2, names
    (sdist,) = [name for name in names if name.endswith(".tar.gz")]
    (wheel,) = [name for name in names if name.endswith(".whl")]
    assert sdist.startswith("nsqd_py-") and wheel.startswith("nsqd_py-")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    # compiled: the wheel is for this CPython and platform; pure Python: any Python 3
    assert (f"-{tag}-{tag}-" in wheel) == _have_compiler(), wheel


def test_the_installed_package_runs_from_the_venv(installed: Path, project: Path) -> None:
    version = _run(installed / "nsqd", "--version", cwd=project).stdout
    assert version.startswith(f"nsqd v{NSQ_VERSION} (built w/python"), version
    probe = "import nsqd_py; print(nsqd_py.__file__); print(nsqd_py.is_compiled())"
    where, compiled = _run(installed / "python", "-c", probe, cwd=project).stdout.split()
    assert Path(where).is_relative_to(installed.parent), "imported from the venv, not the checkout"
    assert compiled == str(_have_compiler())


def test_publish_and_consume_with_the_installed_nsqd(installed: Path, project: Path) -> None:
    tcp_port, http_port = free_port(), free_port()
    proc = subprocess.Popen([installed / "nsqd", f"--tcp-address=127.0.0.1:{tcp_port}",
                             f"--http-address=127.0.0.1:{http_port}", f"--data-path={project}"],
                            cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{http_port}"
        wait_until(lambda: _answers(f"{url}/ping"), what="the installed nsqd answers /ping")
        assert requests.post(f"{url}/pub?topic=wheel", data=b"from the wheel", timeout=5).text == "OK"
        conn = RawConn(tcp_port)
        conn.send("SUB wheel ch")
        assert conn.frame() == (0, b"OK")
        conn.send("RDY 1")
        kind, data = conn.frame()
        assert kind == 2 and data.endswith(b"from the wheel")
    finally:
        proc.terminate()
        assert proc.wait(20) == 0


def test_the_pytest_plugin_from_a_throwaway_project(installed: Path, project: Path) -> None:
    (project / "test_app.py").write_text(PROJECT_TEST)
    result = _run(installed / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=project, timeout=180)
    assert "1 passed" in result.stdout


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).text == "OK"
    except requests.ConnectionError:
        return False
