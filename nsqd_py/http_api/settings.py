"""GET and POST /topic/settings and /channel/settings (beyond nsqd): the controls of config/queue_settings.py.

`POST /topic/settings?topic=T&max_channel_depth=1000` sets an override on an existing topic (its channels'
default); `POST /channel/settings?topic=T&channel=C&...` on an existing channel. An empty value
(`max_channel_depth=`) clears the override, so the topic's or the process default applies again. The answer
waits for the nsqd.dat write that covers the change, as /topic/pause does, and is `{"settings": ...}`: every
control of that scope with its value in force and where it comes from (what `GET` answers too). Errors are
nsqd's: 404 TOPIC_NOT_FOUND or CHANNEL_NOT_FOUND, 400 `INVALID_SETTING - <what it takes>`.
"""

from __future__ import annotations

import falcon

from ..config.queue_settings import (
    CHANNEL,
    TOPIC,
    QueueSettings,
    SettingError,
    check_dead_letter_name,
    parse_changes,
)
from ..core.nsqd import NSQD
from ..core.topic import Topic
from ..web.params import request_query, required_arg, topic_channel_args
from ..web.responses import APIError
from .topics import existing_topic


class QueueSettingsResource:
    """`/topic/settings` (scope `topic`) or `/channel/settings` (scope `channel`)."""

    def __init__(self, nsqd: NSQD, scope: str) -> None:
        self.nsqd = nsqd
        self.scope = scope

    def _target(self, req: falcon.Request) -> tuple[Topic, QueueSettings]:
        if self.scope == TOPIC:
            topic = existing_topic(self.nsqd, required_arg(req, "topic", "INVALID_TOPIC"))
            return topic, topic.settings
        topic_name, channel_name = topic_channel_args(req)
        topic = existing_topic(self.nsqd, topic_name)
        channel = topic.get_existing_channel(channel_name)
        if channel is None:
            raise APIError(404, "CHANNEL_NOT_FOUND")
        return topic, channel.settings

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> dict:
        _topic, settings = self._target(req)
        return {"settings": settings.describe(self.scope)}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> dict:
        topic, settings = self._target(req)
        query = {key: values[-1] for key, values in request_query(req).items()}
        before = dict(settings.overrides)
        try:
            settings.update(parse_changes(query, self.scope, ("topic", CHANNEL)))
            if settings.value("max_attempts"):
                check_dead_letter_name(settings.value("dead_letter_topic"), topic.name)
        except SettingError as err:
            settings.overrides = before
            raise APIError(400, f"INVALID_SETTING - {err}") from None
        topic.settings_changed()
        self.nsqd.metadata_file.changed(topic.name)
        return {"settings": settings.describe(self.scope)}
