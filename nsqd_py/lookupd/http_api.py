"""nsqlookupd's HTTP API on Falcon, with nsqd's envelope, router and access log (nsqd_py/http_api).

GET /ping, /info, /debug, /lookup, /topics, /channels, /nodes; POST /topic/create, /topic/delete,
/topic/tombstone, /channel/create, /channel/delete. JSON objects come with sorted keys, as Go encodes maps;
lists are `[]`, never null. /lookup hides producers that have not pinged within --inactive-producer-timeout or
are tombstoned (for --tombstone-lifetime); /nodes hides only the inactive ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import falcon

from ..runtime.version import NSQ_VERSION
from ..web.params import required_arg, topic_channel_args
from ..web.responses import APIError
from ..web.router import Router, falcon_app
from ..wire.names import is_valid_name
from .registration_db import Registration, filter_by_active, keys, subkeys

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd

_ROUTES = (
    ("/ping", "ping"), ("/info", "info"), ("/debug", "debug"), ("/lookup", "lookup"), ("/topics", "topics"),
    ("/channels", "channels"), ("/nodes", "nodes"), ("/topic/create", "topic_create"),
    ("/topic/delete", "topic_delete"), ("/topic/tombstone", "topic_tombstone"),
    ("/channel/create", "channel_create"), ("/channel/delete", "channel_delete"),
)


def create_app(lookupd: NSQLookupd) -> falcon.App:
    app = falcon_app(Router(lookupd.logger))
    api = LookupdAPI(lookupd)
    for path, suffix in _ROUTES:
        app.add_route(path, api, suffix=suffix, plain=path == "/ping")
    return app


class LookupdAPI:
    """One responder per route (Falcon suffixes); each returns its data or raises APIError."""

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self.db = lookupd.db
        self.log = lookupd.logger

    def on_get_ping(self, req: falcon.Request, resp: falcon.Response) -> str:
        return "OK"

    def on_get_info(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        return {"version": NSQ_VERSION}

    def on_get_topics(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        return {"topics": keys(self.db.find_registrations("topic", "*", ""))}

    def on_get_channels(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        topic = required_arg(req, "topic")
        return {"channels": subkeys(self.db.find_registrations("channel", topic, "*"))}

    def on_get_lookup(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        topic = required_arg(req, "topic")
        if not self.db.find_registrations("topic", topic, ""):
            raise APIError(404, "TOPIC_NOT_FOUND")
        opts = self.lookupd.opts
        producers = filter_by_active(self.db.find_producers("topic", topic, ""), opts.inactive_producer_timeout,
                                     opts.tombstone_lifetime)
        return {"channels": subkeys(self.db.find_registrations("channel", topic, "*")),
                "producers": [p.peer.to_json() for p in producers]}

    def on_get_nodes(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        opts = self.lookupd.opts
        nodes = []
        for producer in filter_by_active(self.db.find_producers("client", "", ""), opts.inactive_producer_timeout, 0):
            peer = producer.peer
            topics = [r.key for r in self.db.lookup_registrations(peer.id) if r.is_match("topic", "*", "")]
            tombstones = []
            for topic in topics:
                entry = self.db.registrations.get(Registration("topic", topic, ""), {}).get(peer.id)
                tombstones.append(entry is not None and entry.is_tombstoned(opts.tombstone_lifetime))
            nodes.append({**peer.to_json(), "tombstones": tombstones, "topics": topics})
        return {"producers": nodes}

    def on_get_debug(self, req: falcon.Request, resp: falcon.Response) -> dict[str, Any]:
        data: dict[str, list[dict[str, Any]]] = {}
        for key, producers in self.db.registrations.items():
            for producer in producers.values():
                peer = producer.peer
                data.setdefault(f"{key.category}:{key.key}:{key.subkey}", []).append({
                    "broadcast_address": peer.broadcast_address,
                    "hostname": peer.hostname,
                    "http_port": peer.http_port,
                    "id": peer.id,
                    "last_update": peer.last_update,
                    "tcp_port": peer.tcp_port,
                    "tombstoned": producer.tombstoned,
                    "tombstoned_at": producer.tombstoned_at,
                    "version": peer.version,
                })
        return dict(sorted(data.items()))

    def on_post_topic_create(self, req: falcon.Request, resp: falcon.Response) -> None:
        topic = required_arg(req, "topic")
        if not is_valid_name(topic):
            raise APIError(400, "INVALID_ARG_TOPIC")
        self.log.info(f"DB: adding topic({topic})")
        self.db.add_registration(Registration("topic", topic, ""))

    def on_post_topic_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        topic = required_arg(req, "topic")
        for registration in self.db.find_registrations("channel", topic, "*"):
            self.log.info(f"DB: removing channel({registration.subkey}) from topic({topic})")
            self.db.remove_registration(registration)
        for registration in self.db.find_registrations("topic", topic, ""):
            self.log.info(f"DB: removing topic({topic})")
            self.db.remove_registration(registration)

    def on_post_topic_tombstone(self, req: falcon.Request, resp: falcon.Response) -> None:
        topic = required_arg(req, "topic")
        node = required_arg(req, "node")
        self.log.info(f"DB: setting tombstone for producer@{node} of topic({topic})")
        for producer in self.db.find_producers("topic", topic, ""):
            if f"{producer.peer.broadcast_address}:{producer.peer.http_port}" == node:
                producer.tombstone()

    def on_post_channel_create(self, req: falcon.Request, resp: falcon.Response) -> None:
        topic, channel = topic_channel_args(req)
        self.log.info(f"DB: adding channel({channel}) in topic({topic})")
        self.db.add_registration(Registration("channel", topic, channel))
        self.log.info(f"DB: adding topic({topic})")
        self.db.add_registration(Registration("topic", topic, ""))

    def on_post_channel_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        topic, channel = topic_channel_args(req)
        registrations = self.db.find_registrations("channel", topic, channel)
        if not registrations:
            raise APIError(404, "CHANNEL_NOT_FOUND")
        self.log.info(f"DB: removing channel({channel}) from topic({topic})")
        for registration in registrations:
            self.db.remove_registration(registration)
