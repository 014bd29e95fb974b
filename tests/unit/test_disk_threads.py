"""run_blocking: a blocking call on a disk thread while the hub keeps serving other greenlets."""

from __future__ import annotations

import os
import select

import gevent
import pytest
from gevent.monkey import get_original

from nsqd_py.runtime import disk_threads
from nsqd_py.runtime.disk_threads import run_blocking

#: a real (unpatched) lock and barrier: the calls below block their OS thread, as an fsync does
_RealLock = get_original("threading", "Lock")
_RealBarrier = get_original("threading", "Barrier")
_get_ident = get_original("_thread", "get_ident")


def test_the_call_runs_off_the_hub_thread_and_its_value_comes_back() -> None:
    assert run_blocking(_get_ident) != _get_ident()
    assert run_blocking(divmod, 17, 5) == (3, 2)


def test_its_exception_is_raised_in_the_caller_and_the_threads_keep_working() -> None:
    with pytest.raises(FileNotFoundError):
        run_blocking(os.stat, "/nonexistent/disk-threads-test")
    assert run_blocking(len, b"abc") == 3


def test_other_greenlets_run_while_a_call_blocks() -> None:
    gate = _RealLock()
    gate.acquire()
    ran: list[str] = []

    def other() -> None:
        ran.append("other")
        gate.release()  # the blocked call can end only once this greenlet has run

    blocked = gevent.spawn(run_blocking, gate.acquire, True, 10)
    gevent.spawn(other)
    assert blocked.get(timeout=10) is True
    assert ran == ["other"]


def test_calls_from_several_greenlets_run_side_by_side() -> None:
    """Each call waits at a barrier for the others: they all pass only if they run at the same time (a group
    commit round syncs one file per queue in parallel)."""
    parties = disk_threads.MAX_THREADS
    barrier = _RealBarrier(parties, timeout=10)
    calls = [gevent.spawn(run_blocking, barrier.wait) for _ in range(parties)]
    gevent.joinall(calls, raise_error=True)
    assert sorted(call.value for call in calls) == list(range(parties))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_threads_of_its_own() -> None:
    run_blocking(len, b"")  # the parent has threads now; the child inherits none of them
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.write(write_end, b"ok" if run_blocking(len, b"xy") == 2 else b"bad")
        finally:
            os._exit(0)
    os.close(write_end)
    assert select.select([read_end], [], [], 10)[0], "the child's call never came back"
    assert os.read(read_end, 8) == b"ok"
    os.waitpid(pid, 0)
    os.close(read_end)
