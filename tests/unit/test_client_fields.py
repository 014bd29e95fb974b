"""tcp/client_fields.py is the one table of a client's fields: what is derived from it, and the compiled class's
typed declarations, which mypyc must see written out, held to it."""

from __future__ import annotations

import ast
from pathlib import Path

from nsqd_py.core.consumer import Consumer
from nsqd_py.tcp import client_state
from nsqd_py.tcp.client_fields import CONSUMER_ATTRS, FIELDS, RECORD_ATTRS, STATE_ATTRS, STATE_FIELDS, STATE_SLOTS
from nsqd_py.tcp.client_state import ClientState
from nsqd_py.tcp.client_stats import client_stats
from nsqd_py.tcp.identify import go_dump, parse_identify

#: nsqd 1.3.0's identifyDataV2 (the /stats row's order is held to Go's by tests/http/test_stats.py)
GO_IDENTIFY = ("client_id", "hostname", "heartbeat_interval", "output_buffer_size", "output_buffer_timeout",
               "feature_negotiation", "tls_v1", "deflate", "deflate_level", "snappy", "sample_rate", "user_agent",
               "msg_timeout")


def test_the_table_keeps_go_1_3_0s_identify_struct_first() -> None:
    """Go 1.3.0's fields in its order, then the development branch's (the log line's order)."""
    keys = tuple(f.identify for f in FIELDS if f.identify)
    assert keys[: len(GO_IDENTIFY)] == GO_IDENTIFY
    assert keys.index("topology_zone") + 1 == keys.index("topology_region")


def test_client_state_declares_the_tables_attributes_with_their_types() -> None:
    """mypyc compiles ClientState's annotations (read from the source: a compiled class keeps none): they must be the
    table's attributes, in its order, of its types (Consumer keeps the rest)."""
    tree = ast.parse((Path(client_state.__file__).parent / "client_state.py").read_text())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ClientState")
    declared = {node.target.id: ast.unparse(node.annotation) for node in cls.body
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    assert tuple(declared) == STATE_ATTRS
    for field in STATE_FIELDS:
        assert declared[field.attr].split("[")[0] == field.kind.__name__, field.attr
    assert set(STATE_SLOTS) == {"channel", "id", *STATE_ATTRS}
    consumer_attrs = {f.attr for f in FIELDS if f.attr and f.attr not in STATE_ATTRS}
    assert consumer_attrs == CONSUMER_ATTRS
    assert all(hasattr(Consumer, attr) for attr in consumer_attrs)  # compiled: no __slots__, but its descriptors


def test_a_new_client_has_the_tables_defaults() -> None:
    client = ClientState(7, "10.0.0.1:4150", 60.0)
    host_set = {"client_id", "hostname", "remote_address", "connect_ts", "pub_counts"}
    for field in STATE_FIELDS:
        if field.attr not in host_set:
            assert getattr(client, field.attr) == field.default, field.attr
    assert (client.client_id, client.hostname, client.pub_counts) == ("10.0.0.1", "10.0.0.1", {})


def test_identify_stats_and_the_record_are_read_from_the_table() -> None:
    data = parse_identify(b'{"client_id":"c","hostname":"h","user_agent":"ua/1","topology_zone":"z"}')
    assert data["topology_zone"] == ""  # known only with the experiment
    assert parse_identify(b'{"topology_zone":"z"}', ("topology-aware-consumption",))["topology_zone"] == "z"
    assert go_dump(data).startswith("{ClientID:c Hostname:h HeartbeatInterval:0 OutputBufferSize:0 "
                                    "OutputBufferTimeout:0 FeatureNegotiation:false TLSv1:false Deflate:false "
                                    "DeflateLevel:0 Snappy:false SampleRate:0 UserAgent:ua/1 MsgTimeout:0")
    assert "Topology" not in go_dump(data)
    client = ClientState(1, "10.0.0.1:4150", 60.0)
    client.published("t", 2)
    row = client_stats(client)
    assert tuple(row) == tuple(f.stats for f in FIELDS if f.stats and not f.stats.startswith("auth"))
    assert row["pub_counts"] == [{"topic": "t", "count": 2}]
    assert row["version"] == "V2"
    assert set(RECORD_ATTRS) <= {f.attr for f in FIELDS if f.stats} | {"msg_timeout"}
