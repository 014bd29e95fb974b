"""nsq_to_file end to end: curl -> nsqd -> nsq_to_file -> files, named and rotated like the Go tool."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nsqd_py.testing import free_port
from tests.support import NsqdProcess, channel_stats, find_channel, finished_everything, unique, wait_until
from tests.tools.support import FakeLookupd, Tool, curl_pub, gzip_lines, run_tool

pytestmark = pytest.mark.process  # starts real processes: left out of `make check`

SHORT_HOST = socket.gethostname().split(".")[0]


def hours() -> set[str]:
    """The <DATETIME> of the default --datetime-format now and a minute ago (a test may straddle the hour)."""
    now = dt.datetime.now()
    return {(now - dt.timedelta(minutes=m)).strftime("%Y-%m-%d_%H") for m in (0, 1)}


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[Callable[..., Tool]]:
    started: list[Tool] = []

    def start(*args: str, **popen: object) -> Tool:
        tool = Tool(tmp_path / "logs", "nsq_to_file", *args, **popen)
        started.append(tool)
        return tool

    yield start
    for tool in started:
        tool.kill()


def settled(nsqd: NsqdProcess, topic: str) -> bool:
    """nsq_to_file's channel got every message of the topic and FINed them all."""
    return finished_everything(nsqd, topic, "nsq_to_file")


def open_files(pid: int) -> set[str]:
    """The paths a process holds open (Linux /proc)."""
    paths = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            paths.add(os.readlink(fd))
    return paths


def all_lines(out: Path) -> list[str]:
    lines: list[str] = []
    for path in sorted(out.iterdir()):
        lines += gzip_lines(path) if path.name.endswith(".gz") else path.read_text().splitlines()
    return lines


def test_gzip_files_hold_exactly_what_was_published(shared_nsqd: NsqdProcess, tmp_path: Path,
                                                    tools: Callable[..., Tool]) -> None:
    topic, out = unique("gz"), tmp_path / "out"
    published = [f"line {i} {'x' * (i % 50)}" for i in range(500)]
    curl_pub(shared_nsqd, topic, published[:250])
    tool = tools(f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", f"--output-dir={out}",
                 "--gzip", "--sync-interval=500ms")
    curl_pub(shared_nsqd, topic, published[250:])
    # message_count counts what reached the channel, not what the tool took: wait until it FINed every one
    wait_until(lambda: (find_channel(shared_nsqd, topic, "nsq_to_file") or {}).get("message_count") == 500, timeout=15)
    wait_until(lambda: settled(shared_nsqd, topic), timeout=60)
    assert tool.stop() == 0, tool.stderr()
    [path] = out.iterdir()
    assert path.name in {f"{topic}.{SHORT_HOST}-000000.{h}.log.gz" for h in hours()}
    assert gzip_lines(path) == published
    stats = channel_stats(shared_nsqd, topic, "nsq_to_file")
    assert (stats["depth"], stats["in_flight_count"], stats["requeue_count"]) == (0, 0, 0)
    assert "syncing" in tool.stderr() and "received CLOSE_WAIT" in tool.stderr()


def test_plain_file_is_appended_across_restarts(shared_nsqd: NsqdProcess, tmp_path: Path,
                                                tools: Callable[..., Tool]) -> None:
    """Without gzip/rotation <REV> is dropped and a restart appends to the same file."""
    topic, out = unique("plain"), tmp_path / "out"
    args = (f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", f"--output-dir={out}",
            "--sync-interval=200ms")
    for batch in (["a", "b"], ["c"]):
        curl_pub(shared_nsqd, topic, batch)
        tool = tools(*args)
        wait_until(lambda: settled(shared_nsqd, topic), timeout=60)  # a loaded machine delivers the redeliveries late
        assert tool.stop() == 0
    [path] = out.iterdir()
    assert path.name in {f"{topic}.{SHORT_HOST}.{h}.log" for h in hours()}
    assert path.read_text() == "a\nb\nc\n"


@pytest.mark.slow
def freeze_with_messages_in_flight(tool: Tool, nsqd: NsqdProcess, topic: str) -> None:
    """SIGSTOP the tool at a moment it holds messages it has not FINed (between its batches it may hold none)."""
    for _ in range(200):
        tool.proc.send_signal(signal.SIGSTOP)
        time.sleep(0.05)  # FINs it sent before it stopped reach nsqd first
        if channel_stats(nsqd, topic, "nsq_to_file")["in_flight_count"] > 0:
            return
        tool.proc.send_signal(signal.SIGCONT)
        time.sleep(0.005)
    raise AssertionError("the tool never held a message in flight")


def test_kill_9_mid_stream_then_restart_loses_nothing(shared_nsqd: NsqdProcess, tmp_path: Path,
                                                      tools: Callable[..., Tool]) -> None:
    """Lines are FINed only after they are durable, so whatever a kill -9 cuts off is delivered again; every
    file stays valid gzip, and the restart opens the next <REV>."""
    topic, out = unique("kill"), tmp_path / "out"
    published = [f"m{i:05d}" for i in range(20000)]
    curl_pub(shared_nsqd, topic, published)
    args = (f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", f"--output-dir={out}",
            "--gzip", "--max-in-flight=100", "--consumer-opt=msg_timeout,1s")
    first = tools(*args)
    wait_until(lambda: out.exists() and any(p.stat().st_size > 0 for p in out.iterdir()), timeout=15)
    wait_until(lambda: channel_stats(shared_nsqd, topic, "nsq_to_file")["message_count"] -
             channel_stats(shared_nsqd, topic, "nsq_to_file")["depth"] > 2000, timeout=15, interval=0.01)
    freeze_with_messages_in_flight(first, shared_nsqd, topic)  # so the kill surely cuts some off
    first.stop(sig=signal.SIGKILL)
    assert channel_stats(shared_nsqd, topic, "nsq_to_file")["depth"] > 0, "killed too late to prove anything"
    second = tools(*args)
    wait_until(lambda: Counter(all_lines(out)).keys() >= set(published), timeout=120, interval=0.2)
    # what the kill cut off comes back once its 1 s msg_timeout passes (the second run may have written every
    # line before that, from the backlog and from lines the first wrote but never FINed)
    wait_until(lambda: channel_stats(shared_nsqd, topic, "nsq_to_file")["timeout_count"] > 0, timeout=15)
    wait_until(lambda: settled(shared_nsqd, topic), timeout=60)  # a loaded machine delivers the redeliveries late
    assert second.stop() == 0
    lines = all_lines(out)  # every file complete, valid gzip
    assert set(lines) == set(published)
    assert len(lines) - len(published) <= 200  # duplicates only from what was in flight at the kill
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 2 and "-000000." in names[0] and "-000001." in names[1]


def test_rotation_by_size(shared_nsqd: NsqdProcess, tmp_path: Path, tools: Callable[..., Tool]) -> None:
    topic, out = unique("size"), tmp_path / "out"
    published = [f"{i:04d}" + "y" * 95 for i in range(50)]  # 100 bytes per line with its newline
    curl_pub(shared_nsqd, topic, published)
    tool = tools(f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", f"--output-dir={out}",
                 "--rotate-size=1000", "--sync-interval=200ms", "--datetime-format=fixed")  # no new hour midway
    wait_until(lambda: settled(shared_nsqd, topic), timeout=60)  # a loaded machine delivers the redeliveries late
    assert tool.stop() == 0
    paths = sorted(out.iterdir())
    assert [p.name for p in paths] == [f"{topic}.{SHORT_HOST}-{rev:06d}.fixed.log" for rev in range(len(paths))]
    assert all(p.stat().st_size <= 1100 for p in paths)  # rotated once past 1000 bytes: at most one line over
    assert len(paths) == 5  # 11 lines (1100 bytes) per file
    assert all_lines(out) == published


def test_rotation_by_interval_and_skip_empty_files(shared_nsqd: NsqdProcess, tmp_path: Path,
                                                   tools: Callable[..., Tool]) -> None:
    topic, out = unique("interval"), tmp_path / "out"
    tool = tools(f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", f"--output-dir={out}",
                 "--rotate-interval=1s", "--sync-interval=300ms", "--skip-empty-files", "--datetime-format=fixed")

    def written(count: int) -> bool:
        stats = find_channel(shared_nsqd, topic, "nsq_to_file") or {}
        return stats.get("message_count") == count and stats.get("depth") == 0 and stats.get("in_flight_count") == 0

    published = []
    for i in range(3):
        published.append(f"tick {i}")
        curl_pub(shared_nsqd, topic, [published[-1]])
        # once the line is FINed its file is open; 1.4s later that file is older than --rotate-interval
        wait_until(lambda count=i + 1: written(count), timeout=10)
        time.sleep(1.4)
    assert tool.stop() == 0
    paths = sorted(out.iterdir())
    assert len(paths) == 3, [p.name for p in paths]
    assert [p.read_text() for p in paths] == [f"{line}\n" for line in published]
    assert tool.stderr().count("since last open, rotating...") >= 2  # each of the first two files closed by age


def test_work_dir_moves_finished_files_and_bumps_rev_on_conflict(shared_nsqd: NsqdProcess, tmp_path: Path,
                                                                 tools: Callable[..., Tool]) -> None:
    topic, out, work = unique("work"), tmp_path / "out", tmp_path / "work"
    out.mkdir()
    taken = {h: out / f"{topic}.{SHORT_HOST}-000000.{h}.log" for h in hours()}
    for path in taken.values():
        path.write_text("already here\n")
    curl_pub(shared_nsqd, topic, ["w1", "w2"])
    tool = tools(f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", f"--output-dir={out}",
                 f"--work-dir={work}", "--sync-interval=200ms")
    wait_until(lambda: work.exists() and any(work.iterdir()), timeout=15)
    [working] = work.iterdir()
    assert "-000001." in working.name  # -000000 exists in the output dir
    assert tool.stop() == 0
    assert list(work.iterdir()) == []
    moved = out / working.name
    assert moved.read_text() == "w1\nw2\n"
    assert "output file already exists" in tool.stderr() and "moving finished file" in tool.stderr()


def test_topic_pattern_with_lookupd(shared_nsqd: NsqdProcess, tmp_path: Path, tools: Callable[..., Tool]) -> None:
    keep, skip, out = unique("pat_keep"), unique("other"), tmp_path / "out"
    curl_pub(shared_nsqd, keep, ["kept"])
    curl_pub(shared_nsqd, skip, ["skipped"])
    lookupd = FakeLookupd([shared_nsqd], [keep, skip])
    try:
        tool = tools(f"--lookupd-http-address={lookupd.address}", "--topic-pattern=^pat_", f"--output-dir={out}",
                     "--topic-refresh=1s")
        wait_until(lambda: settled(shared_nsqd, keep), timeout=15)
        assert tool.stop() == 0
    finally:
        lookupd.stop()
    assert all_lines(out) == ["kept"]
    assert find_channel(shared_nsqd, skip, "nsq_to_file") is None
    assert f"WARNING: skipping topic {skip} (doesn't match pattern ^pat_)" in tool.stderr()


def test_topic_not_matching_the_pattern_is_warned_about(shared_nsqd: NsqdProcess, tmp_path: Path,
                                                        tools: Callable[..., Tool]) -> None:
    """Go warns (it used to skip silently here) when a --topic does not match --topic-pattern."""
    topic = unique("nomatch")
    tool = tools(f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", "--topic-pattern=^pat_",
                 f"--output-dir={tmp_path / 'out'}")
    wait_until(lambda: "skipping topic" in tool.stderr(), timeout=15)
    assert tool.stop() == 0
    assert f"WARNING: skipping topic {topic} (doesn't match pattern ^pat_)" in tool.stderr()


def test_unknown_flag_prints_usage_and_exits_2() -> None:
    out = run_tool("nsq_to_file", "--bogus")
    assert out.returncode == 2
    stderr = out.stderr.decode()
    assert stderr.startswith("flag provided but not defined: -bogus\nUsage of nsq_to_file:\n")
    assert "  -rotate-size rotate-size\n" in stderr and "(default 200)" in stderr


@pytest.mark.parametrize(("args", "message"), [
    ([], "--nsqd-tcp-address or --lookupd-http-address required."),
    (["--nsqd-tcp-address=a:1"], "--topic or --topic-pattern required"),
    (["--nsqd-tcp-address=a:1", "--topic-pattern=x"], "--lookupd-http-address must be specified when no --topic"),
    (["--nsqd-tcp-address=a:1", "--lookupd-http-address=b:2", "--topic=t"],
     "use --nsqd-tcp-address or --lookupd-http-address not both"),
    (["--nsqd-tcp-address=a:1", "--topic=t", "--gzip-level=10"], "invalid --gzip-level value (10), should be 1-9"),
    (["--nsqd-tcp-address=a:1", "--topic=t", "--gzip", "--filename-format=<TOPIC>.log"],
     "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"),
    (["--nsqd-tcp-address=a:1", "--topic=t", "--channel="], "--channel is required"),
    (["--nsqd-tcp-address=a:1", "--topic=t", "--log-level=loud"], "--log-level is invalid"),
    (["--nsqd-tcp-address=a:1", "--topic=t", "--consumer-opt=warp,9"], "invalid option warp"),
])
def test_bad_options_exit_1(args: list[str], message: str) -> None:
    out = run_tool("nsq_to_file", *args)
    assert out.returncode == 1 and message in out.stderr.decode(), out.stderr


def test_version() -> None:
    out = run_tool("nsq_to_file", "--version")
    assert out.returncode == 0 and out.stdout.decode().startswith("nsq_to_file v1.3.0")


def test_unreachable_nsqd_is_retried_with_clear_logs(tmp_path: Path, tools: Callable[..., Tool]) -> None:
    address = f"127.0.0.1:{free_port()}"
    tool = tools(f"--nsqd-tcp-address={address}", "--topic=t", f"--output-dir={tmp_path / 'out'}")
    wait_until(lambda: tool.stderr().count("error connecting to nsqd") >= 2, timeout=10)
    assert f"({address}) error connecting to nsqd - failed to connect to {address}" in tool.stderr()
    assert "re-connecting in 1s" in tool.stderr() and "re-connecting in 2s" in tool.stderr()
    assert tool.stop() == 0
    assert not (tmp_path / "out").exists()


@pytest.fixture
def readonly_dir(tmp_path: Path) -> Iterator[Path]:
    """An output dir nsq_to_file may not write to."""
    target = tmp_path / "readonly"
    target.mkdir(mode=0o555)
    target.chmod(0o555)
    yield target
    target.chmod(0o755)


def without_root_override() -> list[str]:
    """A command prefix so that root, too, obeys the directory's mode bits (drops CAP_DAC_OVERRIDE)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("capsh") is None:
        pytest.skip("running as root and capsh is not available to drop CAP_DAC_OVERRIDE")
    return ["capsh", "--drop=cap_dac_override", "--", "-c", 'exec "$0" "$@"']


def test_unwritable_output_dir_is_fatal_and_nothing_is_fined(shared_nsqd: NsqdProcess, readonly_dir: Path,
                                                             tools: Callable[..., Tool]) -> None:
    topic = unique("ro")
    curl_pub(shared_nsqd, topic, ["one", "two", "three"])
    tool = tools(f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", f"--output-dir={readonly_dir}",
                 prefix=without_root_override())
    assert tool.wait(20) == 1
    stderr = tool.stderr()
    assert f"FATAL: [{topic}/nsq_to_file] unable to open {readonly_dir}/{topic}.{SHORT_HOST}." in stderr
    assert ": permission denied" in stderr
    stats = channel_stats(shared_nsqd, topic, "nsq_to_file")
    assert stats["depth"] + stats["in_flight_count"] == 3  # still owed: nothing was FINed
    assert list(readonly_dir.iterdir()) == []


def test_sighup_syncs_closes_and_reopens_the_next_rev(shared_nsqd: NsqdProcess, tmp_path: Path,
                                                      tools: Callable[..., Tool]) -> None:
    topic, out = unique("hup"), tmp_path / "out"
    tool = tools(f"--nsqd-tcp-address={shared_nsqd.tcp_address}", f"--topic={topic}", f"--output-dir={out}",
                 "--gzip")
    curl_pub(shared_nsqd, topic, ["before"])
    wait_until(lambda: out.exists() and any(out.iterdir()), timeout=15)
    wait_until(lambda: settled(shared_nsqd, topic), timeout=10)
    (first_path,) = out.iterdir()
    assert str(first_path) in open_files(tool.proc.pid)
    tool.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: str(first_path) not in open_files(tool.proc.pid), timeout=10)
    curl_pub(shared_nsqd, topic, ["after"])
    wait_until(lambda: len(list(out.iterdir())) == 2, timeout=10)
    assert tool.stop() == 0
    first, second = sorted(out.iterdir())
    assert "-000000." in first.name and "-000001." in second.name
    assert (gzip_lines(first), gzip_lines(second)) == (["before"], ["after"])
