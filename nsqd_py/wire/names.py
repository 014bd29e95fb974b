"""The one validator for topic and channel names (nsqd's internal/protocol/names.go)."""

import re

_VALID_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")


def is_valid_name(name: str) -> bool:
    """1-64 characters of ``[.a-zA-Z0-9_-]``, optionally ending in ``#ephemeral``."""
    return 0 < len(name) <= 64 and _VALID_NAME.fullmatch(name) is not None
