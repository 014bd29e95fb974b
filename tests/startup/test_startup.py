"""The nsqd process itself: --version, log lines, listeners, fatal start errors, config precedence."""

from __future__ import annotations

import platform
import re
import socket
import subprocess
from pathlib import Path

import pytest
import requests

from nsqd_py.config import queue_settings
from nsqd_py.testing import free_port
from tests.support import NSQD_BIN, NsqdProcess, RawConn, wait_until

pytestmark = pytest.mark.process  # starts real processes: left out of `make check`

LOG_LINE = re.compile(r"^\[nsqd\] \d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{6} (DEBUG|INFO|WARNING|ERROR|FATAL): ")


def run_nsqd(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NSQD_BIN), *args], capture_output=True, text=True, timeout=timeout)


#: how client libraries' test harnesses (e.g. pynsq's) read `nsqd --version` before they start an nsqd
HARNESS_VERSION = re.compile(r"^(?P<name>[a-z]+) v(?P<version>[0-9]+\.[0-9]+\.[0-9]+)(?:-[a-z]+)? "
                             r"\(built w/(?P<build>[a-z0-9.-]+)\)$")
EXECUTABLES = ["nsqd", "nsqlookupd", "nsq_tail", "nsq_to_file", "nsq_stat"]  # Go's to_nsq has no -version


@pytest.mark.parametrize("name", EXECUTABLES)
@pytest.mark.parametrize("flag", ["--version", "-version", "--version=true"])
def test_version_line_is_what_harnesses_parse(name: str, flag: str) -> None:
    result = subprocess.run([str(NSQD_BIN.parent / name), flag], capture_output=True, text=True, timeout=20)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    # the harness pattern's name is letters only; the tools keep Go's names (`nsq_tail v1.3.0 ...`)
    match = HARNESS_VERSION.match(line.replace(name, name.replace("_", ""), 1))
    assert match, line
    assert line.startswith(f"{name} v")
    assert match["version"] == "1.3.0"
    assert match["build"].startswith(f"python{platform.python_version()}-nsqdpy"), "says it is nsqd-py"


def test_version_with_other_flags_is_still_parsed_in_full() -> None:
    """Only `--version` alone takes the fast path; a bad flag next to it is reported as Go's flag package does."""
    assert run_nsqd("--version", "--tcp-address=127.0.0.1:0").stdout.startswith("nsqd v1.3.0 (built w/")
    bad = run_nsqd("--version", "--no-such-flag")
    assert bad.returncode == 2 and "flag provided but not defined: -no-such-flag" in bad.stderr


def test_startup_log_lines_and_real_port_for_port_0(tmp_path: Path) -> None:
    proc = subprocess.Popen([str(NSQD_BIN), "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                             f"--data-path={tmp_path}"], stderr=subprocess.PIPE, text=True)
    try:
        lines: list[str] = []
        assert proc.stderr is not None
        while not any("HTTP: listening on" in line for line in lines):
            lines.append(proc.stderr.readline())
        assert all(LOG_LINE.match(line) for line in lines), lines
        assert HARNESS_VERSION.match(lines[0].split("INFO: ", 1)[1].strip()), lines[0]
        assert re.search(r"INFO: ID: \d+$", lines[1])
        tcp = next(line for line in lines if "TCP: listening on" in line)
        port = int(tcp.rsplit(":", 1)[1])
        assert port > 0
        conn = RawConn(port)
        conn.send("PUB t", b"x")
        assert conn.frame() == (0, b"OK")
    finally:
        proc.terminate()
        proc.wait(20)


def test_address_in_use_is_fatal(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_nsqd(f"--tcp-address=127.0.0.1:{port}", f"--data-path={tmp_path}")
    assert result.returncode == 1
    assert (f"FATAL: failed to instantiate nsqd - listen (127.0.0.1:{port}) failed - listen tcp "
            f"127.0.0.1:{port}: bind: address already in use") in result.stderr


def test_bad_node_id_and_unknown_flag(tmp_path: Path) -> None:
    result = run_nsqd("--node-id=1024", f"--data-path={tmp_path}")
    assert result.returncode == 1
    assert "FATAL: failed to instantiate nsqd - --node-id must be [0,1024)" in result.stderr
    result = run_nsqd("--no-such-flag")
    assert result.returncode == 2
    assert "flag provided but not defined: -no-such-flag" in result.stderr
    assert "Usage of nsqd:" in result.stderr
    assert run_nsqd("-h").returncode == 0


def test_flag_beats_config_beats_default(tmp_path: Path) -> None:
    config = tmp_path / "nsqd.toml"
    http_port, tcp_port = free_port(), free_port()
    config.write_text(f'http_address = "127.0.0.1:{http_port}"\ntcp_address = "127.0.0.1:1"\n'
                      'max_rdy_count = 42\nmsg_timeout = "7s"\nmem_queue_size = 123\n')
    proc = subprocess.Popen([str(NSQD_BIN), f"--config={config}", "--max-rdy-count=43",
                             f"--tcp-address=127.0.0.1:{tcp_port}", f"--data-path={tmp_path}"],
                            stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{http_port}"
    try:
        wait_until(lambda: _pings(base))
        assert requests.get(f"{base}/config/max_rdy_count", timeout=5).json() == 43
        assert requests.get(f"{base}/config/msg_timeout", timeout=5).json() == 7_000_000_000
        assert requests.get(f"{base}/config/mem_queue_size", timeout=5).json() == 123
        assert requests.get(f"{base}/config/max_msg_size", timeout=5).json() == 1048576
        assert requests.get(f"{base}/config/tcp_address", timeout=5).text == f"127.0.0.1:{tcp_port}"  # strings raw
    finally:
        proc.terminate()
        assert proc.wait(20) == 0


def _pings(base: str) -> bool:
    try:
        return requests.get(f"{base}/ping", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def test_bad_config_file_is_fatal(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("mem_queue_size = [\n")
    result = run_nsqd(f"--config={config}")
    assert result.returncode == 1
    assert f"FATAL: failed to load config file {config} - " in result.stderr


def test_log_level_and_prefix(tmp_path: Path) -> None:
    (tmp_path / "nsqd.dat").write_text('{"topics":[{"name":"bad!","paused":false,"channels":null}],"version":"1.3.0"}')
    proc = NsqdProcess(tmp_path, "--log-level=warn", "--log-prefix=[custom] ").start()
    assert proc.stop() == 0
    lines = [line for line in proc.log().splitlines() if line]
    assert lines, "the warning must be logged"
    assert all(line.startswith("[custom] ") for line in lines)
    assert not any(" INFO: " in line for line in lines)
    assert any(" WARNING: skipping creation of invalid topic bad!" in line for line in lines)


#: flags of nsqd's development branch that 1.3.0 does not have (the README lists them)
DEVELOPMENT_FLAGS = {"auth-http-request-method", "enable-experiment", "topology-region", "topology-zone"}
#: process-wide flags beyond nsqd (the per-topic and per-channel ones are queue_settings.SETTINGS)
BEYOND_NSQD_FLAGS = {"persist-deferred", "sigterm", "http-auth-required", "http-admin-identity"}


def _flag_blocks(usage: str) -> dict[str, str]:
    """`-name type` line plus its help lines, by flag name."""
    blocks: dict[str, str] = {}
    for block in re.split(r"\n(?=  -)", usage.split("\n", 1)[1]):
        blocks[block.split()[0].lstrip("-")] = block
    return blocks


def test_help_matches_go_nsqd_1_3_0() -> None:
    """`nsqd -h` against the text Go nsqd 1.3.0 printed: every flag block the same, plus the development
    branch's flags and ours beyond nsqd only."""
    ours = run_nsqd("-h")
    assert ours.returncode == 0
    go = _flag_blocks((Path(__file__).parent / "go_nsqd_1.3.0_help.txt").read_text())
    mine = _flag_blocks(ours.stderr)
    assert set(mine) - set(go) == DEVELOPMENT_FLAGS | BEYOND_NSQD_FLAGS | {s.flag for s in queue_settings.SETTINGS}
    assert {name: mine.get(name) for name in go} == go


def test_bad_log_level_names_the_levels() -> None:
    bad = run_nsqd("--log-level=bogus")
    assert bad.returncode == 2
    assert bad.stderr.startswith('invalid value "bogus" for flag -log-level: invalid log level \'bogus\' '
                                 "(debug, info, warn, error, fatal)\nUsage of nsqd:\n")
