"""A task waiting for more messages with messages in hand (issue 38, case 6): with `pollTimeout` at or above
`msgTimeout` the wait must not keep the keeper from TOUCHing them. Tasks run against a real nsqd as one Spark task
runs them (`SliceTask(...).run()`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from nsqd_py.spark.options import ReadOptions
from nsqd_py.spark.schema import ARROW_SCHEMA
from nsqd_py.spark.slice_task import SliceAssignment, SliceTask
from nsqd_py.spark.slices import SliceSpec
from tests.spark.util import bodies, planned, publish, source_options
from tests.support import NsqdProcess, channel_stats

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("compression", [{}, {"deflate": "true"}, {"snappy": "true"}],
                         ids=["plain", "deflate", "snappy"])
def test_a_poll_longer_than_msg_timeout_redelivers_nothing(nsqd: NsqdProcess, name: Callable[[str], str],
                                                           tmp_path: Path, compression: dict[str, str]) -> None:
    """20 messages arrive, then nsqd stays quiet for pollTimeout (2s, twice msgTimeout) before the slice ends.
    Before: the wait held the lock the keeper needs, nothing TOUCHed the 20 messages in hand, and nsqd timed them
    out and delivered them again to the same connection, again and again: the chunk filled its quota of 100 rows
    with the 20 messages five times each (80 FINs refused). After: the wait leaves the keeper free, so the chunk
    holds the 20 messages once and nsqd timed none out."""
    topic = name("longpoll")
    sent = bodies(20)
    publish(nsqd, topic, sent)
    plan = planned(SliceAssignment(str(tmp_path), "q", 1, "c", SliceSpec(topic, nsqd.tcp_address, 0, 100)))
    opts = ReadOptions.parse(source_options(nsqd, topic, msgTimeout="1s", pollTimeout="2s", **compression))
    table = pa.Table.from_batches(list(SliceTask(plan, opts, None).run()), ARROW_SCHEMA)
    assert sorted(table.column("body").to_pylist()) == sorted(sent)
    assert set(table.column("attempts").to_pylist()) == {1}
    stats = channel_stats(nsqd, topic, "c")
    assert (stats["depth"], stats["in_flight_count"], stats["timeout_count"]) == (0, 0, 0)
