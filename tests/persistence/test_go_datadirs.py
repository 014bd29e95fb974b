"""Data directories written by the real Go nsqd load in ours (../shared/fixtures)."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import requests

from tests.support import NsqdProcess, copy_fixture, drain


def channel_stats(proc: NsqdProcess) -> dict[tuple[str, str | None], dict]:
    out: dict[tuple[str, str | None], dict] = {}
    for topic in proc.stats()["topics"]:
        out[(topic["topic_name"], None)] = topic
        for channel in topic["channels"]:
            out[(topic["topic_name"], channel["channel_name"])] = channel
    return out


def test_clean_go_datadir_loads_with_depths_pause_flags_and_bodies(nsqd_factory, tmp_path: Path) -> None:
    manifest = copy_fixture("go-datadir-clean", tmp_path / "go")
    proc = nsqd_factory(*manifest["startup_flags"], data_path=tmp_path / "go")
    stats = channel_stats(proc)
    assert ("scratch#ephemeral", None) not in stats
    for topic_name, topic in manifest["topics"].items():
        assert stats[(topic_name, None)]["depth"] == topic["depth_after_load"], topic_name
        assert stats[(topic_name, None)]["paused"] == topic["paused"], topic_name
        for channel_name, channel in (topic.get("channels") or {}).items():
            got = stats[(topic_name, channel_name)]
            assert got["depth"] == channel["depth_after_load"], (topic_name, channel_name)
            assert got["paused"] == channel["paused"], (topic_name, channel_name)

    base = proc.http_url
    requests.post(f"{base}/channel/unpause", params={"topic": "orders", "channel": "billing"}, timeout=5)
    requests.post(f"{base}/topic/unpause", params={"topic": "frozen"}, timeout=5)
    for topic_name in ("orders", "frozen"):
        for channel_name, channel in manifest["topics"][topic_name]["channels"].items():
            msgs = drain(proc.tcp_port, topic_name, channel_name)
            assert sorted(m.body.decode() for m in msgs) == channel["expected_bodies_sorted"], channel_name
            attempts_by_body = {m["body"]: m["attempts"] for m in channel["observed_delivery_order"]}
            assert {m.body.decode(): m.attempts for m in msgs} == attempts_by_body, "attempts survive a restart"

    raw = drain(proc.tcp_port, "raw", "reader")
    expected = manifest["topics"]["raw"]["body_sha256_in_publish_order"]
    assert Counter(hashlib.sha256(m.body).hexdigest() for m in raw) == Counter(expected)


def test_go_crash_datadir_gives_back_every_unfinished_message(nsqd_factory, tmp_path: Path) -> None:
    manifest = copy_fixture("go-datadir-crash", tmp_path / "go")
    proc = nsqd_factory(*manifest["startup_flags"], data_path=tmp_path / "go")
    msgs = drain(proc.tcp_port, "events", "sink")
    bodies = {m.body.decode() for m in msgs}
    expected = {f"ev-{i:05d}" for i in range(100, 500)}
    assert expected <= bodies
    assert len(msgs) == 400, "Go's own data dir has no duplicates to give"


def test_go_stale_meta_datadir_salvages_everything_acknowledged(nsqd_factory, tmp_path: Path) -> None:
    manifest = copy_fixture("go-datadir-crash-stale-meta", tmp_path / "go")
    proc = nsqd_factory(*manifest["startup_flags"], data_path=tmp_path / "go")
    msgs = drain(proc.tcp_port, "events", "sink")
    finished = set(manifest["finished_before_kill"])
    expected = {f"ev-{i:05d}" for i in range(500)} - finished
    assert expected <= {m.body.decode() for m in msgs}
