"""The IDENTIFY body: nsqd's identifyDataV2, decoded with Go's encoding/json rules; its fields are the IDENTIFY rows
of client_fields.FIELDS."""

from __future__ import annotations

from typing import Any

from ..go.gojson import decode_struct
from .client_fields import IDENTIFY_FIELDS

#: the decoded body, by IDENTIFY key: every key of the struct, a default where the body left it out
IdentifyData = dict[str, Any]


def _struct(experiments: tuple[str, ...]) -> dict[str, tuple[type, int]]:
    """json name -> (Go kind, int bits): nsqd 1.3.0's struct, and with an experiment its development branch's."""
    return {f.identify: (f.kind, f.bits) for f in IDENTIFY_FIELDS if not f.experiment or f.experiment in experiments}


_STRUCTS: dict[tuple[str, ...], dict[str, tuple[type, int]]] = {}


def parse_identify(body: bytes, experiments: tuple[str, ...] = ()) -> IdentifyData:
    """Decode like Go's json.Unmarshal into nsqd 1.3.0's identifyDataV2 (go/gojson.py has the rules); the
    development branch's fields are known only when their experiment is in ``experiments`` (--enable-experiment)."""
    fields = _STRUCTS.get(experiments)
    if fields is None:
        fields = _STRUCTS[experiments] = _struct(experiments)
    data: IdentifyData = {f.identify: f.default for f in IDENTIFY_FIELDS}
    data.update(decode_struct(body, fields))
    return data


def go_dump(data: IdentifyData, experiments: tuple[str, ...] = ()) -> str:
    """The `%+v` rendering nsqd logs: `{ClientID:x Hostname:y ...}`."""
    parts = []
    for f in IDENTIFY_FIELDS:
        if f.experiment and f.experiment not in experiments:
            continue
        value = data[f.identify]
        if isinstance(value, bool):
            value = "true" if value else "false"
        parts.append(f"{f.go_name}:{value}")
    return "{" + " ".join(parts) + "}"
