"""Our nsqadmin against Go nsqadmin 1.3.0's recorded answers (tests/fixtures/nsqadmin): the same cluster and
requests (scenario.py), every answer and notification compared key for key after normalisation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.admin.conftest import LOOKUPD, NSQADMIN, NSQD
from tests.admin.scenario import ACTIONS, FIXTURES, READS, run

pytestmark = pytest.mark.process

RECORDED: dict[str, Any] = json.loads((FIXTURES / "answers.json").read_text())


@pytest.fixture(scope="module")
def ours() -> dict[str, Any]:
    return run(NSQD, LOOKUPD, NSQADMIN)


def test_the_recording_covers_the_scenario() -> None:
    assert set(RECORDED) == {*READS, *(name for name, *_ in ACTIONS), "notifications"}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_answer_matches_go(ours: dict[str, Any], name: str) -> None:
    assert ours[name] == RECORDED[name]


def test_the_sums_are_across_nodes(ours: dict[str, Any]) -> None:
    """Beyond matching Go: the numbers are the scenario's (A: 5 messages, c1 finished 2, so 3 left, one in
    memory; B: 3, two in memory, as --mem-queue-size=2 keeps at most two)."""
    status, topic = ours["topic_t1"]
    assert status == 200 and topic["node"] == "*" and topic["message_count"] == 8
    c1 = next(c for c in topic["channels"] if c["channel_name"] == "c1")
    assert (c1["depth"], c1["memory_depth"], c1["backend_depth"], c1["message_count"]) == (6, 3, 3, 8)
    assert c1["e2e_processing_latency"]["count"] == 2
    assert ours["channel_t1_c1"][1]["clients"][0]["finish_count"] == 2
