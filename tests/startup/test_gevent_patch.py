"""nsqd_py.daemon.gevent_patch: monkey-patching with one entry-point scan still runs gevent's plugins, and leaves
importlib.metadata as it was; the modules it patches leave nothing nsqd or nsqlookupd calls blocking the hub."""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import nsqd_py
from nsqd_py.daemon.gevent_patch import NSQD_MODULES
from nsqd_py.testing import free_port

pytestmark = pytest.mark.process  # runs a Python subprocess with a fake plugin on its path

PLUGIN = '''
def will(event):
    print("will_patch_all", type(event).__name__)

def did(event):
    print("did_patch_all", type(event).__name__)
'''

ENTRY_POINTS = '''[gevent.plugins.monkey.will_patch_all]
fake = fake_gevent_plugin:will

[gevent.plugins.monkey.did_patch_all]
fake = fake_gevent_plugin:did
'''

PROBE = '''
from importlib import metadata
before = metadata.entry_points
from nsqd_py.daemon.gevent_patch import patch_all
patch_all()
from gevent import monkey
print("socket patched", monkey.is_module_patched("socket"))
print("entry_points restored", metadata.entry_points is before)
'''


def test_plugins_still_run_and_entry_points_is_restored(tmp_path: Path) -> None:
    (tmp_path / "fake_gevent_plugin.py").write_text(PLUGIN)
    info = tmp_path / "fake_gevent_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-gevent-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "will_patch_all GeventWillPatchAllEvent",
        "did_patch_all GeventDidPatchAllEvent",
        "socket patched True",
        "entry_points restored True",
    ]


SSL_PROBE = '''
import sys
from nsqd_py.daemon.gevent_patch import patch_all
patch_all()
print("ssl imported", "ssl" in sys.modules)
{first}
import gevent.ssl, ssl
from gevent import monkey
print("ssl patched", monkey.is_module_patched("ssl"), ssl.SSLContext is gevent.ssl.SSLContext)
print("specs kept", ssl.__spec__.name, gevent.ssl.__spec__.name, ssl.__spec__.loader is not gevent.ssl.__spec__.loader)
'''


@pytest.mark.parametrize("first", ["import ssl", "from gevent import ssl", "import requests"])
def test_ssl_is_patched_as_it_is_first_imported(first: str) -> None:
    """patch_all leaves ssl unimported (~6 ms of every start); the first import of it, or of gevent.ssl (which
    imports it), patches it before anything holds a reference."""
    probe = SSL_PROBE.format(first=first)
    out = subprocess.run([sys.executable, "-W", "error", "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["ssl imported False", "ssl patched True True", "specs kept ssl gevent.ssl True"]


# --- what the executables patch (gevent_patch.NSQD_MODULES) is enough: checked inside a running nsqd/nsqlookupd ---

#: runs `nsqd_py.apps.<app>.main()` with gevent_patch.patch_all wrapped: it patches ``modules`` ("nsqd": the
#: executables' list) and then spawns probe(), which runs inside the started daemon and writes its findings to
#: ``report``. Each check makes one call that waits ~0.3 s (time.sleep; a recv, an SSL handshake and an HTTP request
#: against a peer that accepts and never answers) while a ticker greenlet counts 10 ms sleeps: a call that blocks the
#: hub lets the ticker count nothing.
DAEMON_PROBE = r'''
import importlib, json, sys
from nsqd_py.daemon import gevent_patch

app, modules, report = sys.argv.pop(1), sys.argv.pop(1), sys.argv.pop(1)
patch_all = gevent_patch.patch_all


def patch_and_probe():
    patch_all() if modules == "nsqd" else patch_all([name for name in modules.split(",") if name])
    import gevent
    gevent.spawn(probe)  # runs once the daemon first yields to the hub


def probe():
    import socket, ssl, time
    import gevent, gevent.socket, requests
    from gevent import monkey

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes connections in the backlog; nothing ever reads or answers
    address = silent.getsockname()

    def sleep(ticks):
        time.sleep(0.3)

    def recv(ticks):
        with socket.create_connection(address) as conn:
            conn.settimeout(0.3)
            ticks[0] = 0  # count from here: the connection above may yield (gevent's resolver)
            conn.recv(1)

    def handshake(ticks):
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection(address) as conn:
            conn.settimeout(0.3)
            ticks[0] = 0
            context.wrap_socket(conn)

    def http(ticks):
        requests.get(f"http://{address[0]}:{address[1]}/", timeout=0.3)

    found, errors = {}, {}
    for name, call in [("time.sleep", sleep), ("socket", recv), ("ssl", handshake), ("requests", http)]:
        ticks = [0]

        def tick():
            while True:
                gevent.sleep(0.01)
                ticks[0] += 1

        ticker = gevent.spawn(tick)
        gevent.sleep(0)  # the ticker starts and waits on its first timer
        try:
            call(ticks)
        except OSError:  # timed out (requests' errors are OSErrors too)
            pass
        except Exception as err:  # stdlib ssl cannot wrap gevent's socket, say
            errors[name] = repr(err)
        found[name] = ticks[0]  # read before anything else can switch
        ticker.kill()
    found["errors"] = errors
    found["getaddrinfo"] = socket.getaddrinfo is gevent.socket.getaddrinfo
    found["patched"] = sorted(name for name in ("os", "threading", "time", "socket", "select", "selectors", "ssl",
                                                 "subprocess", "signal", "queue") if monkey.is_module_patched(name))
    with open(report + ".tmp", "w") as out:
        json.dump(found, out)
    import os
    os.replace(report + ".tmp", report)


gevent_patch.patch_all = patch_and_probe
importlib.import_module(f"nsqd_py.apps.{app}").main()
'''

BLOCKING_CHECKS = ("time.sleep", "socket", "ssl", "requests")


def probe_daemon(app: str, modules: str, where: Path) -> dict[str, Any]:
    """Start ``app`` (nsqd or nsqlookupd) with ``modules`` patched, wait for its probe's findings and a /ping answer."""
    report = where / "probe.json"
    http_port = free_port()
    args = [f"--tcp-address=127.0.0.1:{free_port()}", f"--http-address=127.0.0.1:{http_port}"]
    if app == "nsqd":
        args.append(f"--data-path={where}")
    proc = subprocess.Popen([sys.executable, "-c", DAEMON_PROBE, app, modules, str(report), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not report.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.terminate()
                raise AssertionError(f"no probe report: {proc.communicate()[1][-3000:]}")
            time.sleep(0.05)
        while True:  # it serves, too
            try:
                with socket.create_connection(("127.0.0.1", http_port), timeout=5) as conn:
                    conn.sendall(b"GET /ping HTTP/1.0\r\n\r\n")
                    assert conn.recv(4096).split(b"\r\n", 1)[0].endswith(b" 200 OK")
                    break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "no /ping answer"
                time.sleep(0.05)
        found: dict[str, Any] = json.loads(report.read_text())
        return found
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("app", ["nsqd", "nsqlookupd"])
def test_executables_patch_every_blocking_call_they_reach(app: str, tmp_path: Path) -> None:
    found = probe_daemon(app, "nsqd", tmp_path)
    cooperative = {name: found[name] > 0 for name in BLOCKING_CHECKS}
    assert (cooperative, found["errors"]) == (dict.fromkeys(BLOCKING_CHECKS, True), {}), found
    assert found["getaddrinfo"], "DNS look-ups go through gevent's resolver"
    assert found["patched"] == ["socket", "ssl", "time"]


@pytest.mark.parametrize("left_out", NSQD_MODULES)
def test_the_probe_sees_each_module_left_unpatched(left_out: str, tmp_path: Path) -> None:
    """The check above fails if any one of NSQD_MODULES were not patched."""
    found = probe_daemon("nsqd", ",".join(name for name in NSQD_MODULES if name != left_out), tmp_path)
    if left_out == "dns":
        assert not found["getaddrinfo"]
    else:
        blocked = {"time": "time.sleep", "socket": "socket", "ssl": "ssl"}[left_out]
        assert found[blocked] == 0, found


#: nsqd_py's modules that neither daemon runs: clients, tools, Spark, test helpers; gunicorn_support runs under
#: gunicorn's gevent worker, which patches everything itself
NOT_IN_THE_DAEMONS = ("client", "spark", "tools", "testing.py", "pytest_plugin.py", "daemon/gunicorn_support.py")

#: what gevent_patch leaves unpatched: a module of nsqd's that imports one of these needs its patch added there
UNPATCHED = {"threading", "_thread", "queue", "select", "selectors", "subprocess", "multiprocessing", "concurrent",
             "asyncio", "socketserver"}


def test_the_daemons_own_modules_use_nothing_left_unpatched() -> None:
    root = Path(nsqd_py.__file__).parent
    sources = [path for path in root.rglob("*.py")
               if not path.relative_to(root).as_posix().startswith(NOT_IN_THE_DAEMONS)]
    sources += [root.parent / "apps" / "nsqd.py", root.parent / "apps" / "nsqlookupd.py"]
    imports: dict[str, set[str]] = {}
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.partition(".")[0] in UNPATCHED:
                    imports.setdefault(str(path.relative_to(root.parent)), set()).add(name)
    assert len(sources) > 40
    assert imports == {}
