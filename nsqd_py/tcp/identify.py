"""The IDENTIFY body: nsqd's identifyDataV2, decoded with Go's encoding/json rules."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

# (json key, Go field name, type) in the order of nsqd's struct, which is also its log dump order.
_FIELDS: tuple[tuple[str, str, type], ...] = (
    ("client_id", "ClientID", str),
    ("hostname", "Hostname", str),
    ("heartbeat_interval", "HeartbeatInterval", int),
    ("output_buffer_size", "OutputBufferSize", int),
    ("output_buffer_timeout", "OutputBufferTimeout", int),
    ("feature_negotiation", "FeatureNegotiation", bool),
    ("tls_v1", "TLSv1", bool),
    ("deflate", "Deflate", bool),
    ("deflate_level", "DeflateLevel", int),
    ("snappy", "Snappy", bool),
    ("sample_rate", "SampleRate", int),
    ("user_agent", "UserAgent", str),
    ("msg_timeout", "MsgTimeout", int),
    ("topology_zone", "TopologyZone", str),
    ("topology_region", "TopologyRegion", str),
)
_BY_LOWER_KEY = {key: (key, kind) for key, _, kind in _FIELDS}
_INT32_FIELDS = {"sample_rate"}


@dataclass(slots=True)
class IdentifyData:
    client_id: str = ""
    hostname: str = ""
    heartbeat_interval: int = 0
    output_buffer_size: int = 0
    output_buffer_timeout: int = 0
    feature_negotiation: bool = False
    tls_v1: bool = False
    deflate: bool = False
    deflate_level: int = 0
    snappy: bool = False
    sample_rate: int = 0
    user_agent: str = ""
    msg_timeout: int = 0
    topology_zone: str = ""
    topology_region: str = ""

    def go_dump(self) -> str:
        """The `%+v` rendering nsqd logs: `{ClientID:x Hostname:y ...}`."""
        parts = []
        for key, go_name, _ in _FIELDS:
            value = getattr(self, key)
            if isinstance(value, bool):
                value = "true" if value else "false"
            parts.append(f"{go_name}:{value}")
        return "{" + " ".join(parts) + "}"


def parse_identify(body: bytes) -> IdentifyData:
    """Decode like Go's json.Unmarshal into the struct: keys match case-insensitively, unknown keys
    are ignored, null leaves the zero value, a wrongly typed value is an error (ValueError)."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise ValueError(str(err)) from None
    data = IdentifyData()
    if raw is None:
        return data
    if not isinstance(raw, dict):
        raise ValueError("json: cannot unmarshal into Go value of type identifyDataV2")
    for key, value in raw.items():
        match = _BY_LOWER_KEY.get(key.lower())
        if match is None or value is None:
            continue
        name, kind = match
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
            bits = 31 if name in _INT32_FIELDS else 63
            ok = ok and -(1 << bits) <= value < (1 << bits)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise ValueError(f"json: cannot unmarshal {type(value).__name__} into Go struct field {name}")
        setattr(data, name, value)
    return data

