"""POST /topic/* and /channel/*: success answers, every error row, and the effect on the broker and nsqd.dat."""

from __future__ import annotations

import json

import pytest

from tests.http.http_support import NsqdFactory
from tests.inprocess import InProcessNsqd, Nsqd
from tests.support import FRAME_RESPONSE, Reply, wait_until

TOPIC_ACTIONS = ("create", "delete", "empty", "pause", "unpause")


def _empty_ok(reply: Reply) -> None:
    """nsqd's answer when there is no data: 200, Content-Length 0, no Content-Type."""
    assert reply.status == 200, reply.body
    assert reply.body == b"" and reply.header("Content-Length") == "0"
    assert reply.header("Content-Type") is None
    assert reply.header("X-Nsq-Content-Type") == "nsq; version=1.0"


def _error(reply: Reply, status: int, text: str) -> None:
    assert (reply.status, reply.json()) == (status, {"message": text})


def _post(nsqd: Nsqd, target: str) -> Reply:
    return nsqd.request("POST", target)


def _topics(nsqd: Nsqd) -> dict[str, dict]:
    return {t["topic_name"]: t for t in nsqd.stats()["topics"]}


def _metadata(nsqd: Nsqd) -> dict:
    return json.loads((nsqd.data_path / "nsqd.dat").read_text())


# ---- topics -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "status", "text"), [
    ("/topic/create", 400, "MISSING_ARG_TOPIC"),
    ("/topic/create?topic=bad!", 400, "INVALID_TOPIC"),
    ("/topic/create?topic=", 400, "INVALID_TOPIC"),
    ("/topic/delete", 400, "MISSING_ARG_TOPIC"),
    ("/topic/delete?topic=nope", 404, "TOPIC_NOT_FOUND"),
    ("/topic/delete?topic=bad!", 404, "TOPIC_NOT_FOUND"),  # not validated, only looked up
    ("/topic/empty", 400, "MISSING_ARG_TOPIC"),
    ("/topic/empty?topic=bad!", 400, "INVALID_TOPIC"),
    ("/topic/empty?topic=nope", 404, "TOPIC_NOT_FOUND"),
    ("/topic/pause", 400, "MISSING_ARG_TOPIC"),
    ("/topic/pause?topic=bad!", 404, "TOPIC_NOT_FOUND"),
    ("/topic/unpause", 400, "MISSING_ARG_TOPIC"),
    ("/topic/unpause?topic=nope", 404, "TOPIC_NOT_FOUND"),
    *[(f"/topic/{action}?topic=x&y=%", 400, "INVALID_REQUEST") for action in TOPIC_ACTIONS],
])
def test_topic_errors(inproc: InProcessNsqd, target: str, status: int, text: str) -> None:
    _error(_post(inproc, target), status, text)


def test_topic_create_is_idempotent_and_persisted(inproc: InProcessNsqd) -> None:
    _empty_ok(_post(inproc, "/topic/create?topic=tt_create"))
    _empty_ok(_post(inproc, "/topic/create?topic=tt_create"))
    assert "tt_create" in _topics(inproc)
    assert "tt_create" in {t["name"] for t in _metadata(inproc)["topics"]}


def test_topic_delete(inproc: InProcessNsqd) -> None:
    _empty_ok(_post(inproc, "/topic/create?topic=tt_delete"))
    _empty_ok(_post(inproc, "/channel/create?topic=tt_delete&channel=c"))
    _empty_ok(_post(inproc, "/topic/delete?topic=tt_delete"))
    assert "tt_delete" not in _topics(inproc)
    _error(_post(inproc, "/topic/delete?topic=tt_delete"), 404, "TOPIC_NOT_FOUND")


def test_topic_empty_drops_only_the_topics_own_queue(inproc: InProcessNsqd) -> None:
    assert inproc.request("POST", "/mpub?topic=tt_empty", b"a\nb\nc").status == 200
    assert _topics(inproc)["tt_empty"]["depth"] == 3
    _empty_ok(_post(inproc, "/topic/empty?topic=tt_empty"))
    assert _topics(inproc)["tt_empty"]["depth"] == 0


def test_topic_pause_and_unpause_rewrite_metadata(inproc: InProcessNsqd) -> None:
    _empty_ok(_post(inproc, "/topic/create?topic=tt_pause"))
    _empty_ok(_post(inproc, "/topic/pause?topic=tt_pause"))
    assert _topics(inproc)["tt_pause"]["paused"] is True
    assert {t["name"]: t["paused"] for t in _metadata(inproc)["topics"]}["tt_pause"] is True
    _empty_ok(_post(inproc, "/topic/unpause?topic=tt_pause"))
    assert _topics(inproc)["tt_pause"]["paused"] is False
    assert {t["name"]: t["paused"] for t in _metadata(inproc)["topics"]}["tt_pause"] is False


def test_paused_topic_holds_messages_until_unpaused(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    conn.identify()
    assert conn.sub("tt_hold", "c") == (FRAME_RESPONSE, b"OK")
    conn.send("RDY 5")
    _empty_ok(_post(inproc, "/topic/pause?topic=tt_hold"))
    assert inproc.request("POST", "/pub?topic=tt_hold", b"held").status == 200
    assert _topics(inproc)["tt_hold"]["depth"] == 1
    _empty_ok(_post(inproc, "/topic/unpause?topic=tt_hold"))
    assert conn.message().body == b"held"


# ---- channels -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("action", TOPIC_ACTIONS)
@pytest.mark.parametrize(("query", "status", "text"), [
    ("", 400, "MISSING_ARG_TOPIC"),
    ("?topic=bad!&channel=c", 400, "INVALID_ARG_TOPIC"),
    ("?topic=tc_base", 400, "MISSING_ARG_CHANNEL"),
    ("?topic=tc_base&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
    ("?topic=tc_base&channel=" + "c" * 65, 400, "INVALID_ARG_CHANNEL"),
    ("?topic=nope&channel=c", 404, "TOPIC_NOT_FOUND"),
    ("?topic=tc_base&channel=c&%gg", 400, "INVALID_REQUEST"),
])
def test_channel_errors(inproc: InProcessNsqd, action: str, query: str, status: int, text: str) -> None:
    _post(inproc, "/topic/create?topic=tc_base")
    _error(_post(inproc, f"/channel/{action}{query}"), status, text)


@pytest.mark.parametrize("action", ["delete", "empty", "pause", "unpause"])
def test_channel_not_found(inproc: InProcessNsqd, action: str) -> None:
    _post(inproc, "/topic/create?topic=tc_base")
    _error(_post(inproc, f"/channel/{action}?topic=tc_base&channel=nope"), 404, "CHANNEL_NOT_FOUND")


def test_channel_create_never_creates_the_topic(inproc: InProcessNsqd) -> None:
    _error(_post(inproc, "/channel/create?topic=tc_absent&channel=c"), 404, "TOPIC_NOT_FOUND")
    assert "tc_absent" not in _topics(inproc)


def test_channel_lifecycle(inproc: InProcessNsqd) -> None:
    _empty_ok(_post(inproc, "/topic/create?topic=tc_life"))
    _empty_ok(_post(inproc, "/channel/create?topic=tc_life&channel=a"))
    _empty_ok(_post(inproc, "/channel/create?topic=tc_life&channel=a"))
    _empty_ok(_post(inproc, "/channel/pause?topic=tc_life&channel=a"))
    channel = _topics(inproc)["tc_life"]["channels"][0]
    assert (channel["channel_name"], channel["paused"]) == ("a", True)
    meta = {t["name"]: t for t in _metadata(inproc)["topics"]}["tc_life"]
    assert meta["channels"] == [{"name": "a", "paused": True}]
    _empty_ok(_post(inproc, "/channel/unpause?topic=tc_life&channel=a"))
    assert _topics(inproc)["tc_life"]["channels"][0]["paused"] is False
    _empty_ok(_post(inproc, "/channel/delete?topic=tc_life&channel=a"))
    assert _topics(inproc)["tc_life"]["channels"] == []


def test_channel_empty_drops_queued_and_in_flight(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    conn.identify()
    assert conn.sub("tc_empty", "c") == (FRAME_RESPONSE, b"OK")
    conn.send("RDY 1")
    assert inproc.request("POST", "/mpub?topic=tc_empty", b"1\n2\n3").status == 200
    conn.message()
    wait_until(lambda: _topics(inproc)["tc_empty"]["channels"][0]["in_flight_count"] == 1)
    _empty_ok(_post(inproc, "/channel/empty?topic=tc_empty&channel=c"))
    channel = _topics(inproc)["tc_empty"]["channels"][0]
    assert (channel["depth"], channel["in_flight_count"]) == (0, 0)


def test_channel_delete_closes_its_consumers(inproc: InProcessNsqd) -> None:
    conn = inproc.connect()
    conn.identify()
    assert conn.sub("tc_kick", "c") == (FRAME_RESPONSE, b"OK")
    _empty_ok(_post(inproc, "/channel/delete?topic=tc_kick&channel=c"))
    assert conn.is_closed()


def test_admin_calls_are_access_logged(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory()
    _post(nsqd, "/topic/create?topic=a")
    _post(nsqd, "/channel/create?topic=nope&channel=c")
    log = nsqd.log()
    assert "INFO: 200 POST /topic/create?topic=a (127.0.0.1:" in log
    assert "INFO: 404 POST /channel/create?topic=nope&channel=c (127.0.0.1:" in log
