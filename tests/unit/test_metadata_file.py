"""core/metadata.py: the grouped nsqd.dat writes, in process: the file always equals a fresh encoding of the
broker, and changes made together share one write."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import gevent
import orjson
import pytest

from nsqd_py.config.options import Options
from nsqd_py.core.metadata import document, topic_entry
from nsqd_py.core.nsqd import NSQD
from nsqd_py.runtime.log import Logger


@pytest.fixture
def nsqd(tmp_path: Path) -> NSQD:
    return NSQD(Options(data_path=str(tmp_path)), Logger(stream=io.StringIO()))


def _on_disk(nsqd: NSQD) -> bytes:
    return Path(nsqd.metadata_path).read_bytes()


def _fresh(nsqd: NSQD) -> bytes:
    return document(orjson.dumps(topic_entry(t)) for t in nsqd.topics.values() if not t.ephemeral)


def _writes(nsqd: NSQD) -> int:
    stream = nsqd.logger.stream
    assert isinstance(stream, io.StringIO)
    return stream.getvalue().count("persisting topic/channel metadata")


def test_random_changes_leave_the_file_equal_to_a_fresh_encoding(nsqd: NSQD) -> None:
    rng = random.Random(7)
    names = [f"t{i}" for i in range(8)] + ["e#ephemeral"]
    for _ in range(300):
        name = rng.choice(names)
        action = rng.choice(("topic", "channel", "pause", "unpause", "delete_channel", "delete_topic"))
        topic = nsqd.get_existing_topic(name)
        if action == "topic" or topic is None:
            nsqd.get_topic(name)
        elif action == "channel":
            topic.get_channel(rng.choice(("a", "b", "c#ephemeral")))
        elif action in ("pause", "unpause"):
            target = rng.choice([topic, *topic.channels.values()])
            getattr(target, action)()
            nsqd.metadata_file.changed(name)
        elif action == "delete_channel" and topic.channels:
            topic.delete_existing_channel(rng.choice(list(topic.channels)))
        elif action == "delete_topic":
            nsqd.delete_existing_topic(name)
        assert _on_disk(nsqd) == _fresh(nsqd)
    meta = json.loads(_on_disk(nsqd))
    assert meta["version"] == "1.3.0"
    assert all(not t["name"].endswith("#ephemeral") for t in meta["topics"] or [])


def test_an_empty_broker_writes_null_topics(nsqd: NSQD) -> None:
    nsqd.get_topic("gone")
    nsqd.delete_existing_topic("gone")
    assert _on_disk(nsqd) == b'{"topics":null,"version":"1.3.0"}'


def test_changes_made_together_share_a_write(nsqd: NSQD) -> None:
    creators = [gevent.spawn(lambda i=i: nsqd.get_topic(f"t{i}").get_channel("c")) for i in range(50)]
    gevent.joinall(creators, raise_error=True)
    meta = json.loads(_on_disk(nsqd))
    assert sorted(t["name"] for t in meta["topics"]) == sorted(f"t{i}" for i in range(50))
    assert all(t["channels"] == [{"name": "c", "paused": False}] for t in meta["topics"])
    # 100 changes (50 topics, 50 channels): the first write goes alone, the rest wait for the next ones
    assert _writes(nsqd) <= 4


def test_a_finder_of_an_unsettled_topic_waits_for_its_write(nsqd: NSQD) -> None:
    """A publisher that finds a topic whose create is not on disk yet answers only after that write."""
    seen: list[bool] = []
    creator = gevent.spawn(nsqd.get_topic, "fresh")
    gevent.sleep(0)  # the creator has put the topic in the map and waits for the write
    assert "fresh" in nsqd.topics
    finder = gevent.spawn(lambda: (nsqd.get_topic("fresh"), seen.append(b'"fresh"' in _on_disk(nsqd))))
    gevent.joinall([creator, finder], raise_error=True)
    assert seen == [True]
