"""A TCP client's row in /stats (nsqd's ClientV2Stats), built from the stats rows of client_fields.FIELDS.

Given to core/stats.py's snapshot by the /stats handler, so the core never reads TCP client fields.
"""

from __future__ import annotations

from typing import Any

from .client_fields import STATS_FIELDS
from .client_state import ClientState

Stats = dict[str, Any]

#: (stats key, attribute or "" for a constant, the constant, omitempty), in ClientV2Stats' order
_ROW = tuple((f.stats, f.attr, f.default, f.omitempty) for f in STATS_FIELDS)


def client_stats(client: ClientState, topic_filter: str = "") -> Stats:
    """One client row, in ClientV2Stats' order, with its omitempty fields left out when empty."""
    row: Stats = {}
    for key, attr, constant, omitempty in _ROW:
        if not attr:
            value = constant
        elif attr == "pub_counts":
            value = _first_pub_count(client.pub_counts, topic_filter)
        else:
            value = getattr(client, attr)
        if value or not omitempty:
            row[key] = value
    return row


def _first_pub_count(pub_counts: dict[str, int], topic_filter: str) -> list[Stats]:
    """nsqd's loop `break`s after the first entry it keeps, so there is never more than one."""
    for topic, count in pub_counts.items():
        if not topic_filter or topic == topic_filter:
            return [{"topic": topic, "count": count}]
    return []
