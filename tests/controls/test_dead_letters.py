"""Max attempts and dead letters (beyond nsqd, issue 45 item 3) against the real nsqd: a message that would get one
delivery more than max_attempts goes to the dead-letter topic unchanged, and leaves its channel."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import NSQD_BIN, NsqdProcess, channel_stats, unique, wait_until

pytestmark = pytest.mark.process


def _consumer(nsqd: NsqdProcess, topic: str, channel: str = "c"):
    conn = nsqd.connect()
    conn.identify()
    conn.sub(topic, channel)
    conn.send("RDY 1")
    return conn


def test_the_message_moves_unchanged_after_max_attempts(nsqd_factory) -> None:
    nsqd = nsqd_factory("--max-attempts=2")
    topic = unique("dlq")
    nsqd.request("POST", f"/topic/create?topic={topic}")
    nsqd.request("POST", f"/channel/create?topic={topic}&channel=c")
    assert nsqd.request("POST", f"/pub?topic={topic}", b"poison").status == 200
    conn = _consumer(nsqd, topic)
    seen = []
    for _ in range(2):
        msg = conn.message()
        seen.append(msg.attempts)
        conn.send(f"REQ {msg.id.decode()} 0")
    assert seen == [1, 2]
    dead = f"{topic}.dead"
    wait_until(lambda: [t["message_count"] for t in nsqd.stats()["topics"] if t["topic_name"] == dead] == [1],
               timeout=5)
    row = channel_stats(nsqd, topic, "c")
    assert (row["dead_letter_count"], row["depth"], row["in_flight_count"]) == (1, 0, 0)
    assert row["settings"] == {"max_attempts": 2, "dead_letter_topic": "{topic}.dead"}
    dead_conn = _consumer(nsqd, dead, "inspect")
    nsqd.request("POST", f"/channel/create?topic={dead}&channel=inspect")
    moved = dead_conn.message()
    assert (moved.body, moved.id, moved.timestamp) == (b"poison", msg.id, msg.timestamp)
    assert moved.attempts == 3  # its two deliveries kept, plus this one
    dead_conn.send(f"REQ {moved.id.decode()} 0")
    assert dead_conn.message().attempts == 4  # a dead-letter topic takes no dead letters of its own
    metrics = nsqd.request("GET", "/metrics").body.decode()
    assert f'nsq_channel_dead_letter_total{{channel="c",topic="{topic}"}} 1.0' in metrics


def test_a_channel_override_with_its_own_template(nsqd_factory) -> None:
    nsqd = nsqd_factory()
    topic = unique("dlqown")
    nsqd.request("POST", f"/topic/create?topic={topic}")
    nsqd.request("POST", f"/channel/create?topic={topic}&channel=c")
    reply = nsqd.request("POST", f"/channel/settings?topic={topic}&channel=c&max_attempts=1"
                                 "&dead_letter_topic=graveyard.{topic}")
    assert reply.status == 200
    nsqd.request("POST", f"/pub?topic={topic}", b"once")
    conn = _consumer(nsqd, topic)
    first = conn.message()
    conn.send(f"REQ {first.id.decode()} 0")
    graveyard = f"graveyard.{topic}"
    wait_until(lambda: [t["message_count"] for t in nsqd.stats()["topics"] if t["topic_name"] == graveyard] == [1],
               timeout=5)
    assert channel_stats(nsqd, topic, "c")["dead_letter_count"] == 1


@pytest.mark.parametrize(("query", "message"), [
    ("dead_letter_topic=dead", "dead_letter_topic: must be a topic name containing {topic}, such as {topic}.dead"),
    ("dead_letter_topic={topic}!", "dead_letter_topic: must be a topic name containing {topic}, such as {topic}.dead"),
    ("max_attempts=2&dead_letter_topic={topic}.dead.letters.that.make.the.name.too.long",
     "dead_letter_topic: '{name}' is not a valid topic name (at most 64 characters)"),
])
def test_bad_templates_get_a_400(nsqd_factory, query: str, message: str) -> None:
    nsqd = nsqd_factory()
    topic = unique("dlq_bad_template_with_a_long_name")
    nsqd.request("POST", f"/topic/create?topic={topic}")
    reply = nsqd.request("POST", f"/topic/settings?topic={topic}&{query}")
    name = f"{topic}.dead.letters.that.make.the.name.too.long"
    assert (reply.status, reply.json()) == (400, {"message": f"INVALID_SETTING - {message.replace('{name}', name)}"})
    assert nsqd.request("GET", f"/topic/settings?topic={topic}").json()["settings"]["max_attempts"] == {
        "value": 0, "source": "default"}


def test_a_bad_template_flag_is_fatal(tmp_path: Path) -> None:
    run = subprocess.run([str(NSQD_BIN), f"--data-path={tmp_path}", "--dead-letter-topic=dead"], capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 1
    assert ("FATAL: failed to instantiate nsqd - --dead-letter-topic must be a topic name containing {topic}, such "
            "as {topic}.dead") in run.stderr
