"""POST /topic/{create,delete,empty,pause,unpause} and POST /channel/{create,delete,empty,pause,unpause}.

Each check matches nsqd's handler: topic routes say `INVALID_TOPIC`, channel routes `INVALID_ARG_TOPIC`;
/topic/delete, /topic/pause and /topic/unpause look the name up without validating it; channel routes need
an existing topic (404 TOPIC_NOT_FOUND) and never create one. Each change answers once nsqd.dat covers it
(core/metadata.py). Beyond nsqd: while nsqd drains, a create that would make a topic or channel is 503 DRAINING;
`/channel/create` with `start` and `/channel/reset` replay a topic's retained log (replay.py).
"""

from __future__ import annotations

import falcon

from ..core.channel import Channel
from ..core.errors import DrainingError
from ..core.nsqd import NSQD
from ..core.topic import Topic
from ..web.params import request_query, required_arg, topic_channel_args
from ..web.responses import APIError
from . import replay
from .params import DRAINING, topic_from_query


def _topic_name(req: falcon.Request, validate: bool) -> str:
    return required_arg(req, "topic", "INVALID_TOPIC" if validate else None)


def existing_topic(nsqd: NSQD, name: str) -> Topic:
    """The topic, or nsqd's 404 TOPIC_NOT_FOUND."""
    topic = nsqd.get_existing_topic(name)
    if topic is None:
        raise APIError(404, "TOPIC_NOT_FOUND")
    return topic


class Topics:
    """One resource, one responder per action (Falcon route suffixes)."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def _existing(self, name: str) -> Topic:
        return existing_topic(self.nsqd, name)

    def on_post_create(self, req: falcon.Request, resp: falcon.Response) -> None:
        topic_from_query(self.nsqd, request_query(req))

    def on_post_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        if not self.nsqd.delete_existing_topic(_topic_name(req, validate=False)):
            raise APIError(404, "TOPIC_NOT_FOUND")

    def on_post_empty(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._existing(_topic_name(req, validate=True)).empty()

    def on_post_pause(self, req: falcon.Request, resp: falcon.Response) -> None:
        topic = self._existing(_topic_name(req, validate=False))
        topic.pause()
        self.nsqd.metadata_file.changed(topic.name)

    def on_post_unpause(self, req: falcon.Request, resp: falcon.Response) -> None:
        topic = self._existing(_topic_name(req, validate=False))
        topic.unpause()
        self.nsqd.metadata_file.changed(topic.name)


class Channels:
    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def _topic_and_name(self, req: falcon.Request) -> tuple[Topic, str]:
        """nsqd's `getExistingTopicFromQuery` with `GetTopicChannelArgs`."""
        topic_name, channel_name = topic_channel_args(req)
        return existing_topic(self.nsqd, topic_name), channel_name

    def _existing(self, req: falcon.Request) -> Channel:
        topic, name = self._topic_and_name(req)
        channel = topic.get_existing_channel(name)
        if channel is None:
            raise APIError(404, "CHANNEL_NOT_FOUND")
        return channel

    def on_post_create(self, req: falcon.Request, resp: falcon.Response) -> dict | None:
        topic, name = self._topic_and_name(req)
        start = request_query(req).get("start")
        log = topic.retained
        if start is not None and log is not None and log.on:  # beyond nsqd: a channel replaying the retained log
            answer = replay.create_at(self.nsqd, topic, name, start[0])
            self.nsqd.metadata_file.settle(topic.name)
            return answer
        try:
            topic.get_channel(name)
        except DrainingError:  # beyond nsqd
            raise APIError(503, DRAINING) from None
        self.nsqd.metadata_file.settle(topic.name)  # a create already under way answers with its write
        return None

    def on_post_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        topic, name = self._topic_and_name(req)
        if not topic.delete_existing_channel(name):
            raise APIError(404, "CHANNEL_NOT_FOUND")

    def on_post_empty(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._existing(req).empty()

    def on_post_reset(self, req: falcon.Request, resp: falcon.Response) -> dict:
        """Beyond nsqd: move the channel to a point of its topic's retained log (http_api/replay.py)."""
        channel = self._existing(req)
        to = request_query(req).get("to")
        if to is None:
            raise APIError(400, "MISSING_ARG_TO")
        return replay.reset(self.nsqd, channel, to[-1])

    def on_post_pause(self, req: falcon.Request, resp: falcon.Response) -> None:
        channel = self._existing(req)
        channel.pause()
        self.nsqd.metadata_file.changed(channel.topic.name)

    def on_post_unpause(self, req: falcon.Request, resp: falcon.Response) -> None:
        channel = self._existing(req)
        channel.unpause()
        self.nsqd.metadata_file.changed(channel.topic.name)
