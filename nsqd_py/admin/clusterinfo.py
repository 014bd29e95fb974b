"""What nsqadmin asks the cluster (Go's internal/clusterinfo): topics, channels, producers and stats from the
nsqlookupd or nsqd nodes, and the admin actions posted to them.

Every query goes to all its nodes at once (`upstream.fan_out`). A query some nodes answered returns its result
and the failed nodes' error texts (Go's PartialErr, which nsqadmin shows as a warning); one no node answered
raises ClusterError (`failed to query any nsqd: ...`, a 502). Results are merged in address order, where Go
merges in the order the answers arrive.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

from ..go.gocompat import join_host_port
from ..runtime.log import Logger
from . import node_stats as st
from .upstream import Client, UpstreamError, fan_out

Errors = list[str]


class ClusterError(Exception):
    """No node answered (or a step of an action failed outright); the text is Go's."""


_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def semver_key(version: str) -> tuple[int, int, int, int, str]:
    """An order on versions as blang/semver compares them (a pre-release sorts first); junk is 0.0.0."""
    match = _SEMVER.match(version)
    if match is None:
        return (0, 0, 0, 1, "")
    major, minor, patch, pre = match.groups()
    return (int(major), int(minor), int(patch), 0 if pre else 1, pre or "")


@dataclass(slots=True)
class Producer:
    """An nsqd as lookupd (or its own /info) describes it; `to_json` is nsqadmin's shape."""

    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    remote_address: str = ""
    topics: list[dict[str, Any]] | None = None
    remote_addresses: list[str] | None = None
    out_of_date: bool = False

    @classmethod
    def from_lookupd(cls, raw: dict[str, Any]) -> Producer:
        names = raw.get("topics") or []
        tombstones = raw.get("tombstones") or []
        topics = [{"topic": name, "tombstoned": bool(tombstones[i]) if i < len(tombstones) else False}
                  for i, name in enumerate(names)] or None
        return cls(hostname=str(raw.get("hostname", "")), broadcast_address=str(raw.get("broadcast_address", "")),
                   tcp_port=int(raw.get("tcp_port", 0)), http_port=int(raw.get("http_port", 0)),
                   version=str(raw.get("version", "")), remote_address=str(raw.get("remote_address", "")),
                   topics=topics)

    @property
    def http_address(self) -> str:
        return join_host_port(self.broadcast_address, self.http_port)

    @property
    def tcp_address(self) -> str:
        return join_host_port(self.broadcast_address, self.tcp_port)

    def to_json(self) -> dict[str, Any]:
        return {"remote_addresses": self.remote_addresses, "remote_address": self.remote_address,
                "hostname": self.hostname, "broadcast_address": self.broadcast_address, "tcp_port": self.tcp_port,
                "http_port": self.http_port, "version": self.version, "topics": self.topics,
                "out_of_date": self.out_of_date}


def _failed(kind: str, errors: Errors) -> ClusterError:
    return ClusterError(f"failed to query any {kind}: " + "\n".join(errors))


def _split(answers: Sequence[Any]) -> tuple[list[Any], Errors]:
    ok = [a for a in answers if not isinstance(a, UpstreamError)]
    return ok, [str(a) for a in answers if isinstance(a, UpstreamError)]


def _uniq_sorted(names: list[str]) -> list[str] | None:
    return sorted(dict.fromkeys(names)) or None


class ClusterInfo:
    """The queries and actions, over one HTTP client; each logs its endpoints as Go's `CI: querying ...`."""

    def __init__(self, client: Client, logger: Logger) -> None:
        self.client = client
        self.logger = logger

    def _get(self, kind: str, endpoint: str) -> Any:
        self.logger.info(f"CI: querying {kind} {endpoint}")
        answer = self.client.get_json(endpoint)
        if not isinstance(answer, dict):
            raise UpstreamError(f"json: cannot unmarshal {type(answer).__name__} into Go value")
        return answer

    # --- lookupd ------------------------------------------------------------------------------------------------

    def lookupd_topics(self, lookupds: Sequence[str]) -> tuple[list[str] | None, Errors]:
        answers, errors = _split(fan_out(lookupds, lambda a: self._get("nsqlookupd", f"http://{a}/topics")))
        if len(errors) == len(lookupds):
            raise _failed("nsqlookupd", errors)
        return _uniq_sorted([t for answer in answers for t in answer.get("topics") or []]), errors

    def lookupd_topic_channels(self, topic: str, lookupds: Sequence[str]) -> tuple[list[str] | None, Errors]:
        query = f"channels?topic={quote_plus(topic)}"
        answers, errors = _split(fan_out(lookupds, lambda a: self._get("nsqlookupd", f"http://{a}/{query}")))
        if len(errors) == len(lookupds):
            raise _failed("nsqlookupd", errors)
        return _uniq_sorted([c for answer in answers for c in answer.get("channels") or []]), errors

    def lookupd_producers(self, lookupds: Sequence[str]) -> tuple[list[Producer], Errors]:
        """Every nsqd registered with any lookupd, once per TCP address, with the lookupds that know it; the
        older versions marked out of date."""
        answers = fan_out(lookupds, lambda a: self._get("nsqlookupd", f"http://{a}/nodes"))
        errors = [str(a) for a in answers if isinstance(a, UpstreamError)]
        if len(errors) == len(lookupds):
            raise _failed("nsqlookupd", errors)
        by_address: dict[str, Producer] = {}
        for lookupd, answer in zip(lookupds, answers, strict=True):
            if isinstance(answer, UpstreamError):
                continue
            for raw in answer.get("producers") or []:
                producer = Producer.from_lookupd(raw)
                known = by_address.setdefault(producer.tcp_address, producer)
                if known is producer and producer.topics is not None:
                    producer.topics.sort(key=lambda t: t["topic"])
                remote = producer.remote_address or "N/A"
                known.remote_addresses = [*(known.remote_addresses or []), f"{lookupd}/{remote}"]
        newest = max((semver_key(p.version) for p in by_address.values()), default=semver_key("0.0.0"))
        for producer in by_address.values():
            producer.out_of_date = semver_key(producer.version) < newest
        return sorted(by_address.values(), key=lambda p: p.hostname), errors

    def lookupd_topic_producers(self, topic: str, lookupds: Sequence[str]) -> tuple[list[Producer], Errors]:
        query = f"lookup?topic={quote_plus(topic)}"
        answers, errors = _split(fan_out(lookupds, lambda a: self._get("nsqlookupd", f"http://{a}/{query}")))
        if len(errors) == len(lookupds):
            raise _failed("nsqlookupd", errors)
        producers: dict[str, Producer] = {}
        for answer in answers:
            for raw in answer.get("producers") or []:
                producer = Producer.from_lookupd(raw)
                producers.setdefault(producer.http_address, producer)
        return list(producers.values()), errors

    # --- nsqd ---------------------------------------------------------------------------------------------------

    def nsqd_topics(self, nsqds: Sequence[str]) -> tuple[list[str] | None, Errors]:
        answers, errors = _split(fan_out(nsqds, lambda a: self._get("nsqd", f"http://{a}/stats?format=json")))
        if len(errors) == len(nsqds):
            raise _failed("nsqd", errors)
        return _uniq_sorted([str(t.get("topic_name", "")) for a in answers for t in a.get("topics") or []]), errors

    def _nsqd_producer(self, address: str, topic: str | None) -> Producer | None:
        """One nsqd from its /info and /stats; with ``topic``, None unless it has that topic."""
        if topic is None:
            info = self._get("nsqd", f"http://{address}/info")
            stats = self._get("nsqd", f"http://{address}/stats?format=json&include_clients=false")
        else:
            stats = self._get("nsqd", f"http://{address}/stats?format=json&topic={quote_plus(topic)}"
                                      "&include_clients=false")
        names = [str(t.get("topic_name", "")) for t in stats.get("topics") or []]
        if topic is not None:
            if topic not in names:
                return None
            info = self._get("nsqd", f"http://{address}/info")
            if not info.get("broadcast_address"):  # nsqd older than 0.3.6: its address as we know it
                host, _, port = address.rpartition(":")
                info = {**info, "broadcast_address": host, "http_port": int(port)}
            if not info.get("hostname"):
                info = {**info, "hostname": address.rpartition(":")[0]}
        return Producer(hostname=str(info.get("hostname", "")),
                        broadcast_address=str(info.get("broadcast_address", "")),
                        tcp_port=int(info.get("tcp_port", 0)), http_port=int(info.get("http_port", 0)),
                        version=str(info.get("version", "")),
                        topics=[{"topic": name, "tombstoned": False} for name in names] or None)

    def nsqd_producers(self, nsqds: Sequence[str], topic: str | None = None) -> tuple[list[Producer], Errors]:
        """The given nsqd (only those with ``topic`` when given), from their /info and /stats."""
        answers, errors = _split(fan_out(nsqds, lambda a: self._nsqd_producer(a, topic)))
        if len(errors) == len(nsqds):
            raise _failed("nsqd", errors)
        return [p for p in answers if p is not None], errors

    def producers(self, lookupds: Sequence[str], nsqds: Sequence[str]) -> tuple[list[Producer], Errors]:
        return self.lookupd_producers(lookupds) if lookupds else self.nsqd_producers(nsqds)

    def topic_producers(self, topic: str, lookupds: Sequence[str],
                        nsqds: Sequence[str]) -> tuple[list[Producer], Errors]:
        return self.lookupd_topic_producers(topic, lookupds) if lookupds else self.nsqd_producers(nsqds, topic)

    def nsqd_stats(self, producers: Sequence[Producer], topic: str = "", channel: str = "",
                   include_clients: bool = True) -> tuple[list[st.Stats], dict[str, st.Stats], Errors]:
        """Every producer's topics (only ``topic`` when given) and the channels summed across producers, keyed
        by channel name, or `topic:channel` when no topic is given (Go's GetNSQDStats)."""
        query = "stats?format=json"
        if topic:
            query += f"&topic={quote_plus(topic)}" + (f"&channel={quote_plus(channel)}" if channel else "")
        if not include_clients:
            query += "&include_clients=false"
        answers = fan_out(producers, lambda p: self._get("nsqd", f"http://{p.http_address}/{query}"))
        errors = [str(a) for a in answers if isinstance(a, UpstreamError)]
        if len(errors) == len(producers):
            raise _failed("nsqd", errors)
        topics: list[st.Stats] = []
        channels: dict[str, st.Stats] = {}
        for producer, answer in zip(producers, answers, strict=True):
            if isinstance(answer, UpstreamError):
                continue
            node = producer.http_address
            for raw in answer.get("topics") or []:
                stats = st.topic_from_nsqd(raw, node, producer.hostname)
                if topic and stats["topic_name"] != topic:
                    continue
                topics.append(stats)
                for one in stats["channels"] or []:
                    key = one["channel_name"] if topic else f"{stats['topic_name']}:{one['channel_name']}"
                    total = channels.setdefault(key, st.new_channel(node, stats["topic_name"], one["channel_name"]))
                    st.add_channel(total, one)
        return st.by_hostname(topics), channels, errors

    # --- actions ------------------------------------------------------------------------------------------------

    def _post_all(self, kind: str, addresses: Sequence[str], path_query: str) -> Errors:
        def post(address: str) -> None:
            endpoint = f"http://{address}/{path_query}"
            self.logger.info(f"CI: querying {kind} {endpoint}")
            self.client.post(endpoint)

        return [str(a) for a in fan_out(addresses, post) if isinstance(a, UpstreamError)]

    def tombstone_node_for_topic(self, topic: str, node: str, lookupds: Sequence[str]) -> Errors:
        """Tombstone ``node``'s ``topic`` on every lookupd, then delete the topic on that nsqd."""
        errors = self._post_all("nsqlookupd", lookupds, f"topic/tombstone?topic={quote_plus(topic)}"
                                                        f"&node={quote_plus(node)}")
        producers, more = self.nsqd_producers([node])
        errors += more
        return errors + self._post_all("nsqd", [p.http_address for p in producers],
                                       f"topic/delete?topic={quote_plus(topic)}")

    def create_topic_channel(self, topic: str, channel: str, lookupds: Sequence[str]) -> Errors:
        """The topic (and channel) on every lookupd; the channel also on every nsqd that has the topic."""
        errors = self._post_all("nsqlookupd", lookupds, f"topic/create?topic={quote_plus(topic)}")
        if channel:
            query = f"topic={quote_plus(topic)}&channel={quote_plus(channel)}"
            errors += self._post_all("nsqlookupd", lookupds, f"channel/create?{query}")
            producers, more = self.lookupd_topic_producers(topic, lookupds)
            errors += more
            errors += self._post_all("nsqd", [p.http_address for p in producers], f"channel/create?{query}")
        return errors

    def delete_topic(self, topic: str, lookupds: Sequence[str], nsqds: Sequence[str]) -> Errors:
        return self._delete(topic, f"topic={quote_plus(topic)}", "topic/delete", lookupds, nsqds)

    def delete_channel(self, topic: str, channel: str, lookupds: Sequence[str], nsqds: Sequence[str]) -> Errors:
        return self._delete(topic, f"topic={quote_plus(topic)}&channel={quote_plus(channel)}", "channel/delete",
                            lookupds, nsqds)

    def _delete(self, topic: str, query: str, uri: str, lookupds: Sequence[str], nsqds: Sequence[str]) -> Errors:
        """The producers first (deleting on lookupd forgets them), then lookupd, then the nsqd."""
        producers, errors = self.topic_producers(topic, lookupds, nsqds)
        errors += self._post_all("nsqlookupd", lookupds, f"{uri}?{query}")
        return errors + self._post_all("nsqd", [p.http_address for p in producers], f"{uri}?{query}")

    def topic_channel_action(self, uri: str, topic: str, channel: str, lookupds: Sequence[str],
                             nsqds: Sequence[str]) -> Errors:
        """`topic/pause`, `channel/empty` ...: posted to every nsqd that has the topic."""
        query = f"topic={quote_plus(topic)}" + (f"&channel={quote_plus(channel)}" if channel else "")
        producers, errors = self.topic_producers(topic, lookupds, nsqds)
        return errors + self._post_all("nsqd", [p.http_address for p in producers], f"{uri}?{query}")
