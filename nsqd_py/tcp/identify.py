"""The IDENTIFY body: nsqd's identifyDataV2, decoded with Go's encoding/json rules."""

from __future__ import annotations

from dataclasses import dataclass

from ..go.gojson import decode_struct

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
_TOPOLOGY_KEYS = ("topology_zone", "topology_region")
#: json name -> (Go kind, int bits): nsqd 1.3.0's struct, and the development branch's with topology fields
_TOPOLOGY_STRUCT = {key: (kind, 32 if key == "sample_rate" else 64) for key, _, kind in _FIELDS}
_STRUCT = {key: spec for key, spec in _TOPOLOGY_STRUCT.items() if key not in _TOPOLOGY_KEYS}


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

    def go_dump(self, topology: bool = False) -> str:
        """The `%+v` rendering nsqd logs: `{ClientID:x Hostname:y ...}`."""
        parts = []
        for key, go_name, _ in _FIELDS:
            if key in _TOPOLOGY_KEYS and not topology:
                continue
            value = getattr(self, key)
            if isinstance(value, bool):
                value = "true" if value else "false"
            parts.append(f"{go_name}:{value}")
        return "{" + " ".join(parts) + "}"


def parse_identify(body: bytes, topology: bool = False) -> IdentifyData:
    """Decode like Go's json.Unmarshal into nsqd 1.3.0's identifyDataV2 (go/gojson.py has the rules); the
    development branch's topology fields are known only when ``topology`` (its experiment) is on."""
    fields = _TOPOLOGY_STRUCT if topology else _STRUCT
    return IdentifyData(**decode_struct(body, fields))
