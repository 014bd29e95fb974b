"""A protocol V2 client's fields, one row each: the one table the IDENTIFY body, the state's attributes, the /stats
row and the worker link's IDENTITY record are all read from.

A row names the field as Go does, its IDENTIFY key (nsqd's identifyDataV2), the attribute it is kept in on
`client_state.ClientState` (or its base `core.consumer.Consumer`), its /stats key (nsqd's ClientV2Stats), its type
and default, and whether an I/O worker sends it to the broker. The rows stand in an order both Go structs keep:
the IDENTIFY rows in identifyDataV2's (its log dump order) and the stats rows in ClientV2Stats' (the JSON's key
order). What IDENTIFY does with a value other than copy it (`copy`) is behaviour, in `protocol._apply_identify`;
the IDENTIFY answer (nsqd's identifyResponse, negotiated values and limits) is written there too.

Adding a field: one row here, plus its behaviour. ClientState's typed declarations (which mypyc must see) are held
to the table by tests/unit/test_client_fields.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.options import TOPOLOGY_EXPERIMENT


@dataclass(frozen=True, slots=True)
class ClientField:
    #: Go's field name (identifyDataV2's for an IDENTIFY key, else clientV2's or ClientV2Stats')
    go_name: str
    #: the IDENTIFY JSON key; "" when IDENTIFY does not carry it
    identify: str = ""
    #: the attribute on the client's state; "" when only IDENTIFY's behaviour reads the value
    attr: str = ""
    #: the /stats key; "" when /stats does not show it
    stats: str = ""
    kind: type = str
    default: Any = ""
    #: Go's integer width, for IDENTIFY's decoding (out of range is a decode error)
    bits: int = 64
    #: IDENTIFY sets the attribute to the value as sent
    copy: bool = False
    #: /stats leaves the key out when the value is empty (Go's omitempty)
    omitempty: bool = False
    #: an I/O worker sends it to the broker in its IDENTITY record (what /stats shows, what delivery reads)
    record: bool = False
    #: IDENTIFY knows the key only with this --enable-experiment on (nsqd's development branch)
    experiment: str = ""


_F = ClientField
FIELDS: tuple[ClientField, ...] = (
    _F("ClientID", identify="client_id", attr="client_id", stats="client_id", copy=True, record=True),
    _F("Hostname", identify="hostname", attr="hostname", stats="hostname", copy=True, record=True),
    _F("HeartbeatInterval", identify="heartbeat_interval", kind=int, default=0),
    _F("OutputBufferSize", identify="output_buffer_size", kind=int, default=0),
    _F("OutputBufferTimeout", identify="output_buffer_timeout", kind=int, default=0),
    _F("FeatureNegotiation", identify="feature_negotiation", kind=bool, default=False),
    _F("TLSv1", identify="tls_v1", kind=bool, default=False),
    _F("Deflate", identify="deflate", kind=bool, default=False),
    _F("DeflateLevel", identify="deflate_level", kind=int, default=0),
    _F("Snappy", identify="snappy", kind=bool, default=False),
    _F("Version", stats="version", default="V2"),
    _F("RemoteAddress", attr="remote_address", stats="remote_address"),
    _F("State", attr="state", stats="state", kind=int, default=0),
    _F("ReadyCount", attr="ready_count", stats="ready_count", kind=int, default=0),
    _F("InFlightCount", attr="in_flight_count", stats="in_flight_count", kind=int, default=0),
    _F("MessageCount", attr="message_count", stats="message_count", kind=int, default=0),
    _F("FinishCount", attr="finish_count", stats="finish_count", kind=int, default=0),
    _F("RequeueCount", attr="requeue_count", stats="requeue_count", kind=int, default=0),
    _F("ConnectTime", attr="connect_ts", stats="connect_ts", kind=int, default=0),
    _F("SampleRate", identify="sample_rate", attr="sample_rate", stats="sample_rate", kind=int, default=0, bits=32,
       record=True),
    _F("Deflate", attr="deflate", stats="deflate", kind=bool, default=False, record=True),
    _F("Snappy", attr="snappy", stats="snappy", kind=bool, default=False, record=True),
    _F("UserAgent", identify="user_agent", attr="user_agent", stats="user_agent", copy=True, record=True),
    _F("MsgTimeout", identify="msg_timeout", attr="msg_timeout", kind=int, default=0, record=True),
    _F("Authed", attr="authed", stats="authed", kind=bool, default=False, omitempty=True, record=True),
    _F("AuthIdentity", attr="auth_identity", stats="auth_identity", omitempty=True, record=True),
    _F("AuthIdentityURL", attr="auth_identity_url", stats="auth_identity_url", omitempty=True, record=True),
    _F("TopologyZone", identify="topology_zone", attr="topology_zone", stats="topology_zone", copy=True,
       record=True, experiment=TOPOLOGY_EXPERIMENT),
    _F("TopologyRegion", identify="topology_region", attr="topology_region", stats="topology_region", copy=True,
       record=True, experiment=TOPOLOGY_EXPERIMENT),
    _F("PubCounts", attr="pub_counts", stats="pub_counts", kind=dict, default=None, omitempty=True),
    _F("TLS", attr="tls", stats="tls", kind=bool, default=False, record=True),
    _F("CipherSuite", attr="tls_cipher_suite", stats="tls_cipher_suite", record=True),
    _F("TLSVersion", attr="tls_version", stats="tls_version", record=True),
    _F("NegotiatedProtocol", attr="tls_negotiated_protocol", stats="tls_negotiated_protocol", record=True),
    _F("NegotiatedProtocolIsMutual", attr="tls_negotiated_protocol_is_mutual",
       stats="tls_negotiated_protocol_is_mutual", kind=bool, default=False, record=True),
)

IDENTIFY_FIELDS = tuple(f for f in FIELDS if f.identify)
#: what IDENTIFY sets as sent, by (IDENTIFY key, attribute)
COPIED = tuple((f.identify, f.attr) for f in FIELDS if f.copy)
STATS_FIELDS = tuple(f for f in FIELDS if f.stats)
#: the attributes an IDENTITY record carries from a worker to the broker
RECORD_ATTRS = tuple(f.attr for f in FIELDS if f.record)
#: the attributes core.consumer.Consumer keeps (the delivery state a channel reads); the rest are ClientState's
CONSUMER_ATTRS = frozenset({"state", "ready_count", "in_flight_count", "message_count", "finish_count",
                            "requeue_count", "sample_rate", "msg_timeout"})
#: ClientState's own attributes from the table (set to their defaults by its __init__, unless it sets them itself)
STATE_FIELDS = tuple(f for f in FIELDS if f.attr and f.attr not in CONSUMER_ATTRS)
STATE_ATTRS = tuple(f.attr for f in STATE_FIELDS)
#: ClientState's __slots__: the table's attributes and the two it keeps beside them
STATE_SLOTS = ("channel", "id", *STATE_ATTRS)
