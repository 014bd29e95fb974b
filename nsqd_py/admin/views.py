"""One function per nsqadmin view and action, returning the dict its JSON API answers (Go's nsqadmin/http.go
handlers), so that the API and the HTML pages render the same data.

A view that reached only some nodes still answers, with `message` set to `WARNING: <errors>`; one that
reached none raises APIError(502, `UPSTREAM_ERROR: ...`). The actions do the same and answer `{"message": ...}`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

from ..go import jsonenc
from ..go.durations import SECOND
from ..runtime.log import Logger
from ..web.responses import APIError
from . import node_stats as st
from .clusterinfo import ClusterError, ClusterInfo, Errors
from .messages import OPEN_LIMIT, PAGE_MESSAGES, peek_nodes, shown
from .options import AdminOptions
from .upstream import UpstreamError

T = TypeVar("T")

#: the actions POST /api/topics/:topic[/:channel] takes, each also the name of nsqd's endpoint
ACTIONS = frozenset(("pause", "unpause", "empty"))


def api_error(code: int, text: str) -> APIError:
    """An error answer whose text may hold quotes or newlines (upstream errors): the envelope writes the text
    into its JSON as it is, so it goes in JSON-escaped."""
    return APIError(code, jsonenc.dumps(text)[1:-1].decode())


def warning(messages: list[str]) -> str:
    """Go's maybeWarnMsg."""
    return "WARNING: " + "; ".join(messages) if messages else ""


class Views:
    """The cluster as nsqadmin shows it. ``opts`` is read on every call: PUT /config changes it live."""

    def __init__(self, opts: AdminOptions, cluster: ClusterInfo, logger: Logger) -> None:
        self.opts = opts
        self.ci = cluster
        self.logger = logger

    @property
    def lookupds(self) -> list[str]:
        return self.opts.nsqlookupd_http_addresses

    @property
    def nsqds(self) -> list[str]:
        return self.opts.nsqd_http_addresses

    def _step(self, what: str, messages: list[str], call: Callable[[], tuple[T, Errors]]) -> T:
        """One query: its value, its partial errors added to ``messages`` (a WARN line), or a 502."""
        try:
            value, errors = call()
        except ClusterError as err:
            self.logger.error(f"failed to {what} - {err}")
            raise api_error(502, f"UPSTREAM_ERROR: {err}") from None
        if errors:
            text = "\n".join(errors)
            self.logger.warn(text)
            messages.append(text)
        return value

    # --- views --------------------------------------------------------------------------------------------------

    def topics(self, inactive: bool = False) -> dict[str, Any]:
        """All topics (sorted); with ``inactive``, the lookupd topics no nsqd produces, with their channels."""
        messages: list[str] = []
        if self.lookupds:
            topics = self._step("get topics", messages, lambda: self.ci.lookupd_topics(self.lookupds))
        else:
            topics = self._step("get topics", messages, lambda: self.ci.nsqd_topics(self.nsqds))
        if not inactive:
            return {"topics": topics, "message": warning(messages)}
        channels_by_topic: dict[str, list[str] | None] = {}
        for topic in (topics or []) if self.lookupds else []:
            try:
                producers, _ = self.ci.lookupd_topic_producers(topic, self.lookupds)
            except ClusterError:
                producers = []
            if not producers:
                try:
                    channels_by_topic[topic] = self.ci.lookupd_topic_channels(topic, self.lookupds)[0]
                except ClusterError:
                    channels_by_topic[topic] = None
        return {"topics": channels_by_topic, "message": warning(messages)}

    def topic(self, topic: str) -> dict[str, Any]:
        """The topic summed across its nodes: depths, counts, channels, e2e, and each node under `nodes`."""
        messages: list[str] = []
        producers = self._step("get topic producers", messages,
                               lambda: self.ci.topic_producers(topic, self.lookupds, self.nsqds))
        per_node = self._step("get topic metadata", messages,
                              lambda: _first_two(self.ci.nsqd_stats(producers, topic, "", False)))
        total = st.new_topic(topic)
        for stats in per_node:
            st.add_topic(total, stats)
        return {**total, "message": warning(messages)}

    def channel(self, topic: str, channel: str) -> dict[str, Any]:
        """The channel summed across its nodes, with clients; only `message` when no node has it."""
        messages: list[str] = []
        producers = self._step("get topic producers", messages,
                               lambda: self.ci.topic_producers(topic, self.lookupds, self.nsqds))
        channels = self._step("get channel metadata", messages,
                              lambda: _second(self.ci.nsqd_stats(producers, topic, channel, True)))
        found = channels.get(channel)
        return {**(found or {}), "message": warning(messages)}

    def channel_messages(self, channel: dict[str, Any]) -> dict[str, Any]:
        """Beyond nsqd: the first messages of each node of a ``channel`` view (admin/messages.py); `answered` is
        false when no node serves a peek (Go's nsqd)."""
        nodes = [n["node"] for n in channel.get("nodes") or []]
        peeked = peek_nodes(self.ci, nodes, channel["topic_name"], channel["channel_name"], PAGE_MESSAGES)
        return {"answered": bool(peeked), "messages": [shown(node, m) for node, found in peeked for m in found]}

    def channel_message(self, topic: str, channel: str, node: str, msg_id: str) -> dict[str, Any]:
        """Beyond nsqd: one message of a channel on one of the topic's nodes, while it is still queued, in flight or
        deferred there; 404 NODE_NOT_FOUND or MESSAGE_NOT_FOUND."""
        messages: list[str] = []
        producers = self._step("get topic producers", messages,
                               lambda: self.ci.topic_producers(topic, self.lookupds, self.nsqds))
        if node not in {p.http_address for p in producers}:
            raise APIError(404, "NODE_NOT_FOUND")
        for at, found in peek_nodes(self.ci, [node], topic, channel, OPEN_LIMIT):
            for peeked in found:
                if peeked["id"] == msg_id:
                    return {**shown(at, peeked), "message": warning(messages)}
        raise APIError(404, "MESSAGE_NOT_FOUND")

    def nodes(self) -> dict[str, Any]:
        """Every nsqd of the cluster, as lookupd (or the nsqd themselves) describe it."""
        messages: list[str] = []
        producers = self._step("get nodes", messages, lambda: self.ci.producers(self.lookupds, self.nsqds))
        return {"nodes": [p.to_json() for p in producers], "message": warning(messages)}

    def node(self, node: str) -> dict[str, Any]:
        """One nsqd (by HTTP address): its topics with channels and clients, and its totals."""
        messages: list[str] = []
        producers = self._step("get producers", messages, lambda: self.ci.producers(self.lookupds, self.nsqds))
        producer = next((p for p in producers if p.http_address == node), None)
        if producer is None:
            raise APIError(404, "NODE_NOT_FOUND")
        try:
            topics, _, _ = self.ci.nsqd_stats([producer], "", "", True)
        except ClusterError as err:
            self.logger.error(f"failed to get nsqd stats - {err}")
            raise api_error(502, f"UPSTREAM_ERROR: {err}") from None
        clients = sum(len(c["clients"] or []) for t in topics for c in t["channels"] or [])
        return {"node": node, "topics": topics or None, "total_messages": sum(t["message_count"] for t in topics),
                "total_clients": clients, "message": warning(messages)}

    def counter(self) -> dict[str, Any]:
        """Messages per topic, channel and node (the counter page), keyed `topic:channel:node`."""
        messages: list[str] = []
        producers = self._step("get counter producer list", messages,
                               lambda: self.ci.producers(self.lookupds, self.nsqds))
        channels = self._step("get nsqd stats", messages,
                              lambda: _second(self.ci.nsqd_stats(producers, "", "", False)))
        counts: dict[str, dict[str, Any]] = {}
        for total in channels.values():
            for one in total["nodes"] or []:
                key = f"{total['topic_name']}:{total['channel_name']}:{one['node']}"
                entry = counts.setdefault(key, {"node": one["node"], "topic_name": total["topic_name"],
                                                "channel_name": total["channel_name"], "message_count": 0})
                entry["message_count"] += one["message_count"]
        return {"stats": counts, "message": warning(messages)}

    def graphite_rate(self, metric: str | None, target: str | None) -> dict[str, Any]:
        """The per-second rate of a graphite ``target`` over the last statsd interval."""
        if metric != "rate":
            raise APIError(400, "INVALID_ARG_METRIC")
        if target is None:
            raise APIError(400, "INVALID_ARG_TARGET")
        interval = self.opts.statsd_interval // SECOND
        query = urlencode({"format": "json", "from": f"-{interval * 2}sec", "target": target,
                           "until": f"-{interval}sec"})
        url = f"{self.opts.graphite_url}/render?{query}"
        self.logger.info(f"GRAPHITE: {url}")
        try:
            answer = self.ci.client.get_json(url)
            rate = float(answer[0]["datapoints"][0][0])
        except (UpstreamError, LookupError, TypeError, ValueError) as err:
            self.logger.error(f"graphite request failed - {err}")
            raise APIError(500, "INTERNAL_ERROR") from None
        return {"rate": "N/A" if rate < 0 else f"{rate / interval:.2f}"}

    # --- actions ------------------------------------------------------------------------------------------------

    def _action(self, what: str, call: Callable[[], Errors]) -> dict[str, Any]:
        messages: list[str] = []
        self._step(what, messages, lambda: (None, call()))
        return {"message": warning(messages)}

    def create_topic_channel(self, topic: str, channel: str) -> dict[str, Any]:
        return self._action("create topic/channel",
                            lambda: self.ci.create_topic_channel(topic, channel, self.lookupds))

    def delete_topic(self, topic: str) -> dict[str, Any]:
        return self._action("delete topic", lambda: self.ci.delete_topic(topic, self.lookupds, self.nsqds))

    def delete_channel(self, topic: str, channel: str) -> dict[str, Any]:
        return self._action("delete channel",
                            lambda: self.ci.delete_channel(topic, channel, self.lookupds, self.nsqds))

    def topic_channel_action(self, action: str, topic: str, channel: str = "") -> dict[str, Any]:
        """pause, unpause or empty a topic (``channel`` empty) or a channel on every nsqd that has the topic."""
        uri = f"{'channel' if channel else 'topic'}/{action}"
        return self._action(f"{action} topic/channel",
                            lambda: self.ci.topic_channel_action(uri, topic, channel, self.lookupds, self.nsqds))

    def tombstone_node_for_topic(self, node: str, topic: str) -> dict[str, Any]:
        return self._action("tombstone node for topic",
                            lambda: self.ci.tombstone_node_for_topic(topic, node, self.lookupds))


def _first_two(result: tuple[list[st.Stats], dict[str, st.Stats], Errors]) -> tuple[list[st.Stats], Errors]:
    return result[0], result[2]


def _second(result: tuple[list[st.Stats], dict[str, st.Stats], Errors]) -> tuple[dict[str, st.Stats], Errors]:
    return result[1], result[2]
