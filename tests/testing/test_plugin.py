"""`nsqd_py.testing` and its pytest plugin, used the way another project would: from a temporary project
directory, with a real pytest run that publishes and consumes through the fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsqd_py.testing import LookupdServer, NsqdServer, ServerError

pytestmark = pytest.mark.process  # starts real processes: left out of `make check`

PROJECT_TEST = '''
def test_roundtrip(nsqd):
    nsqd.publish("events", b"hello")
    nsqd.publish("events", b"a", b"b")
    assert nsqd.consume("events", "test", 3) == [b"hello", b"a", b"b"]


def test_each_test_gets_a_fresh_nsqd(nsqd):
    assert nsqd.stats()["topics"] == []


def test_with_lookupd(nsqd, nsqlookupd):
    import json, time, urllib.error, urllib.request
    nsqd.publish("found", b"x")
    producers, deadline = [], time.time() + 10
    while not producers and time.time() < deadline:
        try:  # 404 TOPIC_NOT_FOUND until nsqd's registration reaches lookupd
            with urllib.request.urlopen(f"{nsqlookupd.http_url}/lookup?topic=found") as reply:
                producers = json.loads(reply.read())["producers"]
        except urllib.error.HTTPError as err:
            assert err.code == 404
        time.sleep(0.1)
    assert producers[0]["tcp_port"] == nsqd.tcp_port
'''


FAST_MODE_TEST = '''
SEEN = []


def test_first(nsqd_session, nsqd_topic):
    nsqd_session.publish(nsqd_topic, b"left behind")
    SEEN.append((nsqd_session.process.pid, nsqd_topic))
    assert nsqd_topic.startswith("test_first-")


def test_second_shares_the_server_not_the_topic(nsqd_session, nsqd_topic):
    pid, first = SEEN[0]
    assert nsqd_session.process.pid == pid
    assert nsqd_topic != first
    assert nsqd_session.stats()["topics"] == [], "the first test's topic and its message were deleted"
    nsqd_session.publish(nsqd_topic, b"mine")
    assert nsqd_session.consume(nsqd_topic, "test", 1) == [b"mine"]
'''


def _run_pytest(project: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=project,
                          capture_output=True, text=True, timeout=180, env=env)


@pytest.mark.parametrize("how", ["-p", "entry point"])
def test_plugin_from_another_project(tmp_path: Path, how: str) -> None:
    (tmp_path / "test_app.py").write_text(PROJECT_TEST)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    if how == "-p":
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        result = _run_pytest(tmp_path, "-p", "nsqd_py.pytest_plugin", env=env)
    else:
        result = _run_pytest(tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def test_fast_mode_one_server_and_a_topic_per_test(tmp_path: Path) -> None:
    (tmp_path / "test_fast.py").write_text(FAST_MODE_TEST)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    result = _run_pytest(tmp_path, "-p", "no:randomly", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_delete_topic_of_a_topic_never_made_is_fine() -> None:
    with NsqdServer() as nsqd:
        nsqd.delete_topic("never_made")
        nsqd.publish("made", b"x")
        nsqd.delete_topic("made")
        assert nsqd.stats()["topics"] == []


def test_context_manager_cleans_up_and_stops_cleanly() -> None:
    with NsqdServer("--mem-queue-size=0") as nsqd:
        data_dir = nsqd.data_dir
        nsqd.publish("kept", b"x")
        assert nsqd.stats("kept")["topics"][0]["depth"] == 1
        process = nsqd.process
    assert process is not None and process.returncode == 0, "SIGTERM: nsqd flushed and exited 0"
    assert not data_dir.exists()


def test_a_given_data_dir_is_kept_across_restarts(tmp_path: Path) -> None:
    with NsqdServer(data_dir=tmp_path) as nsqd:
        nsqd.publish("kept", b"x")
    with NsqdServer(data_dir=tmp_path) as again:
        assert again.consume("kept", "c", 1) == [b"x"]
    assert tmp_path.exists()


def test_a_server_that_cannot_start_says_why() -> None:
    with pytest.raises(ServerError, match=r"exited with 2:\n.*flag -mem-queue-size"), NsqdServer("--mem-queue-size=x"):
        pass


def test_lookupd_server() -> None:
    with LookupdServer() as lookupd, NsqdServer(lookupd=lookupd) as nsqd:
        assert nsqd.process is not None and lookupd.process is not None
        assert f"--lookupd-tcp-address={lookupd.tcp_address}" in nsqd.args()
