"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

The topic a query names, found or created in the broker (nsqd's `getTopicFromQuery`); the query parsing itself is
web/params.py, shared with nsqlookupd."""

from __future__ import annotations

from ..core.errors import BackendError, DrainingError, ExitingError
from ..core.nsqd import NSQD
from ..core.topic import Topic
from ..web.params import Query, required_arg
from ..web.responses import APIError

#: beyond nsqd: the 503's text for what a drain refuses (a message, a new topic or channel)
DRAINING = "DRAINING"


def topic_from_query(nsqd: NSQD, query: Query) -> Topic:
    """nsqd's `getTopicFromQuery`: the topic named by `topic=`, created if new."""
    return get_topic(nsqd, required_arg(query, "topic", "INVALID_TOPIC"))


def get_topic(nsqd: NSQD, name: str) -> Topic:
    """The topic ``name`` (a valid name), created if new (for a publisher or /topic/create); 503 EXITING while nsqd
    shuts down, 500 INTERNAL_ERROR when nsqd.dat could not record it (core/metadata.py), and beyond nsqd 503
    DRAINING for a new topic while nsqd drains."""
    try:
        return nsqd.client_topic(name)
    except DrainingError:
        raise APIError(503, DRAINING) from None
    except ExitingError:
        raise APIError(503, "EXITING") from None
    except BackendError:
        raise APIError(500, "INTERNAL_ERROR") from None
