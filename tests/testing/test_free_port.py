"""`free_port`: two ports asked for before either is bound are two ports, and xdist workers draw from disjoint
slices. A CI run once failed when one nsqd got the same port for --tcp-address and --http-address."""

from __future__ import annotations

import pytest

from nsqd_py import testing
from nsqd_py.testing import free_port


def test_ports_asked_for_before_binding_are_never_the_same() -> None:
    ports = [free_port() for _ in range(1500)]
    assert len(set(ports)) == len(ports)


def test_xdist_workers_draw_from_disjoint_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        slices.append(set(testing._own_ports(32768)))
    assert not (slices[0] & slices[1] or slices[1] & slices[2] or slices[0] & slices[2])
    assert min(map(len, slices)) == (32768 - 10000) // 3
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    for _ in range(20):
        assert free_port() in slices[1] or testing._ephemeral_ports().start <= 11000
