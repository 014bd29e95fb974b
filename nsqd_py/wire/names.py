"""The one validator for topic and channel names (nsqd's internal/protocol/names.go)."""

import re

_VALID_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")
#: names already found valid: every PUB checks its topic's name, and a set lookup costs a tenth of the match
_known_valid: set[str] = set()
#: past this many, new valid names are matched each time (a client inventing names cannot grow the set)
_KNOWN_VALID_LIMIT = 10_000


def is_valid_name(name: str) -> bool:
    """1-64 characters of ``[.a-zA-Z0-9_-]``, optionally ending in ``#ephemeral``."""
    if name in _known_valid:
        return True
    if 0 < len(name) <= 64 and _VALID_NAME.fullmatch(name) is not None:
        if len(_known_valid) < _KNOWN_VALID_LIMIT:
            _known_valid.add(name)
        return True
    return False
