"""nsqadmin's page templates rendered from stats as admin/node_stats.py parses them from nsqd's /stats: what needs
clients a live cluster cannot easily give (TLS and auth at once)."""

from __future__ import annotations

from nsqd_py.admin import node_stats
from nsqd_py.admin.charts import Charts
from nsqd_py.admin.options import AdminOptions
from nsqd_py.admin.pages import template_environment


def test_channel_page_shows_a_clients_tls_and_auth_detail_as_go_does() -> None:
    """Go's channel page puts the TLS version, cipher suite and negotiated protocol in the TLS badge's title, and the
    auth identity in the authed badge, linked to its identity URL; the data comes from nsqd's /stats as parsed."""
    raw_client = {"client_id": "c", "hostname": "h", "remote_address": "10.0.0.1:5", "version": "V2",
                  "user_agent": "ua", "connect_ts": 0, "tls": True, "tls_version": "TLS1.3",
                  "tls_cipher_suite": "TLS_AES_128_GCM_SHA256", "tls_negotiated_protocol": "h2",
                  "tls_negotiated_protocol_is_mutual": True, "authed": True, "auth_identity": "alice",
                  "auth_identity_url": "https://auth.example/alice"}
    channel = node_stats.channel_from_nsqd({"channel_name": "ch", "clients": [raw_client]}, "n:4151", "n", "t")
    total = node_stats.new_channel("*", "t", "ch")
    node_stats.add_channel(total, channel)
    html = template_environment().get_template("channel.html").render(
        base="/", section="topics", charts=Charts(AdminOptions()), lookupds=[], now_ms=0, statsd_interval=60,
        data={**total, "message": ""}, topic="t", channel="ch")
    assert 'title="TLS1.3 TLS_AES_128_GCM_SHA256 h2 mutual:true">tls</span>' in html
    assert '<span class="badge" title="Authed Identity:alice"><a href="https://auth.example/alice">authed</a>' in html


def _channel_page(raw_channel: dict) -> str:
    channel = node_stats.channel_from_nsqd(raw_channel, "n:4151", "n", "t")
    total = node_stats.new_channel("*", "t", "ch")
    node_stats.add_channel(total, channel)
    return template_environment().get_template("channel.html").render(
        base="/", section="topics", charts=Charts(AdminOptions()), lookupds=[], now_ms=0, statsd_interval=60,
        data={**total, "message": ""}, topic="t", channel="ch")


def test_channel_page_shows_the_controls_beyond_nsqd_where_a_node_has_them() -> None:
    """A /stats channel row with controls set (tests/controls has nsqd report them): their values and counts."""
    html = _channel_page({"channel_name": "ch", "dropped_count": 7, "dead_letter_count": 2,
                          "settings": {"max_channel_depth": 100, "channel_overflow": "drop-head", "max_attempts": 3,
                                       "dead_letter_topic": "{topic}.dead"}})
    assert "<h2>Controls beyond nsqd</h2>" in html
    assert "<code>max_channel_depth=100</code> <code>channel_overflow=drop-head</code>" in html
    assert "dropped: 7 dead letter: 2" in html
    assert "Controls beyond nsqd" not in _channel_page({"channel_name": "ch"})
