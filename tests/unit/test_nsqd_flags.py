"""Go-compatible flag parsing (goflags) and nsqd option resolution (options)."""

from __future__ import annotations

import io
import json
import re
import socket
import tomllib
from pathlib import Path

import pytest

from nsqd_py.config import queue_settings
from nsqd_py.config.options import (
    CONFIG_KEYS,
    TLS_NOT_REQUIRED,
    TLS_REQUIRED,
    TLS_REQUIRED_EXCEPT_HTTP,
    ConfigError,
    InstantiateError,
    Options,
    OptionsError,
    ResolveError,
    default_node_id,
    expand_statsd_prefix,
    parse_options,
    toml_defaults,
)
from nsqd_py.go.durations import MILLISECOND, MINUTE, SECOND
from nsqd_py.go.gocompat import go_quote
from nsqd_py.go.goflags import (
    FlagError,
    FlagSet,
    HelpRequested,
    NumError,
    format_float,
    parse_bool,
    parse_float,
    parse_int,
)
from nsqd_py.go.settings import go_field_name, settings_of
from nsqd_py.lookupd.options import LookupdOptions
from nsqd_py.lookupd.options import parse_options as parse_lookupd_options

REPO = Path(__file__).resolve().parents[2]
CONFIG_FILE = REPO / "configs" / "nsqd.toml"


def toml_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "nsqd.toml"
    path.write_text(text)
    return str(path)


def demo_flags(output: io.StringIO | None = None, exit_on_error: bool = True) -> FlagSet:
    flags = FlagSet("demo", output, exit_on_error=exit_on_error)
    flags.add("name", "string", "x", "a `host` name")
    flags.add("count", "int", 7, "how many")
    flags.add("on", "bool", True, "switch")
    flags.add("v", "bool", False, "verbose")
    flags.add("wait", "duration", 2 * SECOND, "how long")
    flags.add("ratio", "float", 0.5, "a ratio")
    flags.add("peer", "list", [], "repeatable")
    return flags


# --- Go number/bool/string helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("10", 10), ("-5", -5), ("+5", 5), ("0x10", 16), ("0X1f", 31), ("010", 8), ("0o17", 15), ("0b101", 5),
     ("1_000", 1000), ("0x_ff", 255), ("0", 0), ("9223372036854775807", (1 << 63) - 1),
     ("-9223372036854775808", -(1 << 63))],
)
def test_parse_int_base0(text: str, value: int) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [("", "invalid syntax"), ("abc", "invalid syntax"), ("08", "invalid syntax"), ("0x", "invalid syntax"),
     ("1__0", "invalid syntax"), ("_1", "invalid syntax"), ("1_", "invalid syntax"), (" 1", "invalid syntax"),
     ("1.0", "invalid syntax"), ("9223372036854775808", "value out of range"),
     ("-9223372036854775809", "value out of range")],
)
def test_parse_int_errors(text: str, reason: str) -> None:
    with pytest.raises(NumError) as info:
        parse_int(text)
    assert info.value.reason == reason
    assert str(info.value) == f"strconv.ParseInt: parsing {go_quote(text)}: {reason}"


def test_parse_int_base10_keeps_leading_zero_decimal() -> None:
    assert parse_int("010", 10) == 10
    with pytest.raises(NumError):
        parse_int("1_000", 10)


def test_parse_bool_set() -> None:
    for text in ("1", "t", "T", "TRUE", "true", "True"):
        assert parse_bool(text) is True
    for text in ("0", "f", "F", "FALSE", "false", "False"):
        assert parse_bool(text) is False
    with pytest.raises(NumError, match=r'strconv.ParseBool: parsing "yes": invalid syntax'):
        parse_bool("yes")


def test_parse_float() -> None:
    assert parse_float("0.99") == 0.99
    assert parse_float("1") == 1.0
    assert parse_float(".5") == 0.5
    assert parse_float("1e-2") == 0.01
    assert parse_float("0x1p-2") == 0.25
    assert parse_float("-Inf") == float("-inf")
    for bad in (" 0.5", "abc", "1,0", "", "+nan"):
        with pytest.raises(NumError, match="invalid syntax"):
            parse_float(bad)
    with pytest.raises(NumError, match="value out of range"):
        parse_float("1e400")


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "0"), (1.0, "1"), (1.5, "1.5"), (-0.5, "-0.5"), (99.0, "99"), (100000.0, "100000"),
     (1e6, "1e+06"), (1.23456789e8, "1.23456789e+08"), (1e-4, "0.0001"), (1e-5, "1e-05"), (1e21, "1e+21")],
)
def test_format_float_like_go_v(value: float, text: str) -> None:
    assert format_float(value) == text


# --- goflags ---------------------------------------------------------------------------------------------------


def test_flag_forms_and_explicit_set() -> None:
    parsed = demo_flags().parse(["-name", "a", "--count=0x10", "--wait", "1m30s", "-ratio=0.25", "rest", "-on=f"])
    assert parsed.values == {"name": "a", "count": 16, "on": True, "v": False, "wait": 90 * SECOND, "ratio": 0.25,
                             "peer": []}
    assert parsed.explicit == {"name", "count", "wait", "ratio"}
    assert parsed.args == ["rest", "-on=f"]


@pytest.mark.parametrize(
    ("args", "value"),
    [(["--on=false"], False), (["--on=0"], False), (["-on=f"], False), (["-on=F"], False), (["-on=FALSE"], False),
     (["-on=true"], True), (["--on"], True), (["-on"], True), ([], True)],
)
def test_bool_flag_values(args: list[str], value: bool) -> None:
    assert demo_flags().parse(args).values["on"] is value


def test_bare_bool_does_not_take_next_argument() -> None:
    parsed = demo_flags().parse(["-v", "false", "-count=1"])
    assert parsed.values["v"] is True
    assert parsed.values["count"] == 7
    assert parsed.args == ["false", "-count=1"]


def test_double_dash_and_single_dash_stop_parsing() -> None:
    assert demo_flags().parse(["--", "-count=1"]).args == ["-count=1"]
    assert demo_flags().parse(["-", "-count=1"]).args == ["-", "-count=1"]


def test_repeatable_list_keeps_order_and_default_untouched() -> None:
    flags = demo_flags()
    parsed = flags.parse(["--peer", "a:1", "-peer=b:2", "--peer=a,b"])
    assert parsed.values["peer"] == ["a:1", "b:2", "a,b"]
    assert flags.parse([]).values["peer"] == []


def test_duration_flag_accepts_only_go_durations() -> None:
    assert demo_flags().parse(["-wait=0"]).values["wait"] == 0
    assert demo_flags().parse(["-wait=250ms"]).values["wait"] == 250 * MILLISECOND


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-x"], "flag provided but not defined: -x"),
        (["--nope=1"], "flag provided but not defined: -nope"),
        (["-count=abc"], 'invalid value "abc" for flag -count: parse error'),
        (["-count", "99999999999999999999"],
         'invalid value "99999999999999999999" for flag -count: value out of range'),
        (["-wait=5"], 'invalid value "5" for flag -wait: parse error'),
        (["-ratio=x"], 'invalid value "x" for flag -ratio: parse error'),
        (["-on=yes"], 'invalid boolean value "yes" for -on: parse error'),
        (["-count"], "flag needs an argument: -count"),
        (["---count=1"], "bad flag syntax: ---count=1"),
        (["-=1"], "bad flag syntax: -=1"),
    ],
)
def test_flag_errors_print_message_and_usage_then_exit_2(args: list[str], message: str) -> None:
    out = io.StringIO()
    flags = demo_flags(out)
    with pytest.raises(SystemExit) as info:
        flags.parse(args)
    assert info.value.code == 2
    assert out.getvalue() == message + "\n" + flags.usage()


@pytest.mark.parametrize("arg", ["-h", "--help", "-help", "--h=1"])
def test_help_prints_usage_and_exits_0(arg: str, capsys: pytest.CaptureFixture[str]) -> None:
    flags = demo_flags()
    with pytest.raises(SystemExit) as info:
        flags.parse([arg])
    assert info.value.code == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == flags.usage()


def test_continue_on_error_mode_raises() -> None:
    out = io.StringIO()
    with pytest.raises(FlagError, match="flag provided but not defined: -x"):
        demo_flags(out, exit_on_error=False).parse(["-x"])
    with pytest.raises(HelpRequested):
        demo_flags(out, exit_on_error=False).parse(["-h"])


def test_usage_layout_matches_go_print_defaults() -> None:
    assert demo_flags().usage() == (
        "Usage of demo:\n"
        "  -count int\n    \thow many (default 7)\n"
        "  -name host\n    \ta host name (default \"x\")\n"
        "  -on\n    \tswitch (default true)\n"
        "  -peer value\n    \trepeatable\n"
        "  -ratio float\n    \ta ratio (default 0.5)\n"
        "  -v\tverbose\n"
        "  -wait duration\n    \thow long (default 2s)\n"
    )


# --- Options: defaults and flags -------------------------------------------------------------------------------


def test_defaults() -> None:
    opts = Options()
    assert opts.node_id == default_node_id(socket.gethostname())
    assert opts.broadcast_address == socket.gethostname()
    assert (opts.tcp_address, opts.http_address, opts.https_address) == ("0.0.0.0:4150", "0.0.0.0:4151",
                                                                         "0.0.0.0:4152")
    assert opts.log_level == 2
    assert opts.msg_timeout == 60 * SECOND
    assert opts.max_output_buffer_timeout == 30 * SECOND
    assert opts.min_output_buffer_timeout == 25 * MILLISECOND
    assert opts.output_buffer_timeout == 250 * MILLISECOND
    assert opts.max_msg_size == 1048576
    assert opts.max_body_size == 5242880
    assert opts.tls_min_version == 0x0301
    assert opts.tls_required == TLS_NOT_REQUIRED
    assert (opts.deflate, opts.snappy, opts.statsd_mem_stats) == (True, True, True)
    assert opts.nsqlookupd_tcp_addresses == []
    assert opts.nsqlookupd_tcp_addresses is not Options().nsqlookupd_tcp_addresses


def test_default_node_id_is_crc32_of_md5() -> None:
    assert default_node_id("vm") == default_node_id("vm")
    assert 0 <= default_node_id("some-host.example.com") < 1024


def test_no_arguments_gives_defaults() -> None:
    assert parse_options([]) == Options()


def test_go_style_flags() -> None:
    opts = parse_options([
        "-mem-queue-size=0x10", "--max-rdy-count", "010", "--sync-every=1_000", "-snappy=f", "--deflate=0",
        "--statsd-exclude-ephemeral", "--msg-timeout=1m30s", "-node-id", "5", "--log-level=debug",
        "--lookupd-tcp-address", "a:4160", "--lookupd-tcp-address=b:4160", "--auth-http-address=http://auth/x",
        "--enable-experiment=topology-aware-consumption", "--verbose", "--worker-id",
    ])
    assert (opts.mem_queue_size, opts.max_rdy_count, opts.sync_every) == (16, 8, 1000)
    assert (opts.snappy, opts.deflate, opts.statsd_exclude_ephemeral) == (False, False, True)
    assert opts.msg_timeout == 90 * SECOND
    assert opts.node_id == 5
    assert opts.log_level == 1
    assert opts.nsqlookupd_tcp_addresses == ["a:4160", "b:4160"]
    assert opts.auth_http_addresses == ["http://auth/x"]
    assert opts.enable_experiment == ["topology-aware-consumption"]


def test_percentiles_repeatable_and_comma_list_sorted_high_to_low() -> None:
    opts = parse_options(["--e2e-processing-latency-percentile=0.5",
                          "--e2e-processing-latency-percentile", "0.99,0.95,1.0"])
    assert opts.e2e_processing_latency_percentiles == [1.0, 0.99, 0.95, 0.5]


def test_unparsable_percentile_flag_is_fatal_like_go() -> None:
    with pytest.raises(ResolveError, match=r"^Could not parse:  0\.95$"):
        parse_options(["--e2e-processing-latency-percentile=0.99, 0.95"])


@pytest.mark.parametrize(
    ("args", "value"),
    [(["--tls-required"], TLS_REQUIRED), (["--tls-required=true"], TLS_REQUIRED),
     (["--tls-required=TCP-HTTPS"], TLS_REQUIRED_EXCEPT_HTTP), (["--tls-required=false"], TLS_NOT_REQUIRED)],
)
def test_tls_required_flag(args: list[str], value: int) -> None:
    assert parse_options([*args, "--tls-cert=c", "--tls-key=k"]).tls_required == value


def test_tls_min_version_flag() -> None:
    assert parse_options(["--tls-min-version=TLS1.2"]).tls_min_version == 0x0303
    assert parse_options(["--tls-min-version=tls1.3"]).tls_min_version == 0x0304
    assert parse_options(["--tls-min-version="]).tls_min_version == 0x0301


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mem-queue-size=abc"], 'invalid value "abc" for flag -mem-queue-size: parse error'),
        (["--msg-timeout=60"], 'invalid value "60" for flag -msg-timeout: parse error'),
        (["--tls-min-version=ssl3.0"],
         'invalid value "ssl3.0" for flag -tls-min-version: unknown tlsVersionOption "ssl3.0"'),
        (["--tls-required=maybe"],
         'invalid boolean value "maybe" for -tls-required: strconv.ParseBool: parsing "maybe": invalid syntax'),
        (["--log-level=loud"],
         "invalid value \"loud\" for flag -log-level: invalid log level 'loud' (debug, info, warn, error, fatal)"),
        (["--x"], "flag provided but not defined: -x"),
    ],
)
def test_bad_command_line_exits_2_with_go_message(args: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_options(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message + "\nUsage of nsqd:\n  -auth-http-address value\n")


def test_usage_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_options(["-h"])
    assert info.value.code == 0
    err = capsys.readouterr().err
    assert "  -tls-required\n    \trequire TLS for client connections (true, false, tcp-https)\n" in err
    msg_timeout = "default duration to wait before auto-requeing a message (default 1m0s)"
    assert f"  -msg-timeout duration\n    \t{msg_timeout}\n" in err
    assert ('  -tcp-address string\n    \taddress to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for '
            'unix socket) (default "0.0.0.0:4150")\n') in err
    assert "'tls1.2' or 'tls1.3') (default tls1.0)\n" in err
    assert "  -log-level value\n    \tset log verbosity: debug, info, warn, error, or fatal (default INFO)\n" in err
    flags = re.findall(r"^  -(\S+)", err, re.M)
    assert flags == sorted(flags)
    assert {f.replace("-", "_") for f in flags} >= set(CONFIG_KEYS) - {"id", "nsqlookupd_tcp_addresses",
                                                                          "auth_http_addresses",
                                                                          "e2e_processing_latency_percentiles"}


def test_version_returns_before_reading_config() -> None:
    opts = parse_options(["--version", "--config=/nonexistent.toml", "--node-id=5000"])
    assert opts.show_version is True


# --- Options: TOML and precedence ------------------------------------------------------------------------------


def test_precedence_flag_over_toml_over_default(tmp_path: Path) -> None:
    path = toml_file(tmp_path, 'mem_queue_size = 5\nmax_rdy_count = 6\nnsqlookupd_tcp_addresses = ["t:1"]\n')
    opts = parse_options(["--config", path, "--mem-queue-size=7", "--lookupd-tcp-address=f:1"])
    assert opts.mem_queue_size == 7
    assert opts.max_rdy_count == 6
    assert opts.sync_every == 2500
    assert opts.nsqlookupd_tcp_addresses == ["f:1"]
    assert opts.config == path


def test_flag_equal_to_default_still_beats_toml(tmp_path: Path) -> None:
    path = toml_file(tmp_path, "snappy = false\nmem_queue_size = 5\n")
    opts = parse_options([f"--config={path}", "--snappy", "--mem-queue-size=10000"])
    assert opts.snappy is True
    assert opts.mem_queue_size == 10000


def test_toml_durations_strings_or_milliseconds(tmp_path: Path) -> None:
    path = toml_file(tmp_path, 'msg_timeout = "90s"\nsync_timeout = 1500\nmax_req_timeout = "1h30m"\n')
    opts = parse_options(["--config", path])
    assert opts.msg_timeout == 90 * SECOND
    assert opts.sync_timeout == 1500 * MILLISECOND
    assert opts.max_req_timeout == 90 * MINUTE


def test_toml_lists_as_arrays_or_comma_strings(tmp_path: Path) -> None:
    path = toml_file(tmp_path, 'nsqlookupd_tcp_addresses = "a:4160,b:4160"\nauth_http_addresses = ["x:1", "y:2"]\n'
                               'e2e_processing_latency_percentiles = "0.5, 0.99"\nenable_experiment = []\n')
    opts = parse_options(["--config", path])
    assert opts.nsqlookupd_tcp_addresses == ["a:4160", "b:4160"]
    assert opts.auth_http_addresses == ["x:1", "y:2"]
    assert opts.e2e_processing_latency_percentiles == [0.5, 0.99]  # TOML order is kept (only flags sort)


def test_toml_percentile_array(tmp_path: Path) -> None:
    path = toml_file(tmp_path, "e2e_processing_latency_percentiles = [1.0, 0.99, 0.95]\n")
    assert parse_options(["--config", path]).e2e_processing_latency_percentiles == [1.0, 0.99, 0.95]


def test_toml_special_keys(tmp_path: Path) -> None:
    path = toml_file(tmp_path, 'log_level = "WARN"\ntls_min_version = "tls1.2"\ntls_required = "tcp-https"\n'
                               'tls_cert = "c"\ntls_key = "k"\n')
    opts = parse_options(["--config", path])
    assert (opts.log_level, opts.tls_min_version, opts.tls_required) == (3, 0x0303, TLS_REQUIRED_EXCEPT_HTTP)
    path = toml_file(tmp_path, 'tls_required = true\ntls_min_version = ""\ntls_cert = "c"\ntls_key = "k"\n')
    opts = parse_options(["--config", path])
    assert (opts.tls_required, opts.tls_min_version) == (TLS_REQUIRED, 0x0301)


def test_toml_bools_from_strings_and_inverted_integers(tmp_path: Path) -> None:
    # go-options' coerceBool reads a TOML integer inverted: `0` is true, anything else false.
    path = toml_file(tmp_path, 'snappy = 0\ndeflate = 1\nstatsd_mem_stats = "f"\nstatsd_exclude_ephemeral = true\n')
    opts = parse_options(["--config", path])
    assert (opts.snappy, opts.deflate, opts.statsd_mem_stats, opts.statsd_exclude_ephemeral) == (True, False, False,
                                                                                                True)


def test_toml_numbers_from_strings_and_node_id_key(tmp_path: Path) -> None:
    path = toml_file(tmp_path, 'id = 42\nmem_queue_size = "123"\nnode_id = 7\nunknown_key = 1\n[section]\nx = 1\n')
    opts = parse_options(["--config", path])
    assert (opts.node_id, opts.mem_queue_size) == (42, 123)


def test_toml_non_string_for_string_option_renders_like_go(tmp_path: Path) -> None:
    path = toml_file(tmp_path, "data_path = 5\n")
    assert parse_options(["--config", path]).data_path == "%!s(int64=5)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('mem_queue_size = "abc"', 'ERROR: Resolve failed to coerce value abc (10000) for field MemQueueSize - '
                                   'strconv.ParseInt: parsing "abc": invalid syntax'),
        ("mem_queue_size = 1.5", "ERROR: Resolve failed to coerce value 1.5 (10000) for field MemQueueSize - "
                                 "invalid int64 value type float64"),
        ('msg_timeout = "60"', 'ERROR: Resolve failed to coerce value 60 (1m0s) for field MsgTimeout - '
                               'time: missing unit in duration "60"'),
        ('snappy = "yes"', 'ERROR: Resolve failed to coerce value yes (true) for field SnappyEnabled - '
                           'strconv.ParseBool: parsing "yes": invalid syntax'),
        # Go names the struct field: initialisms upper case, four names of its own (all checked against nsqd 1.3.0)
        ('broadcast_http_port = "x"', 'ERROR: Resolve failed to coerce value x (0) for field BroadcastHTTPPort - '
                                      'strconv.ParseInt: parsing "x": invalid syntax'),
        ("statsd_udp_packet_size = true", "ERROR: Resolve failed to coerce value true (508) for field "
                                          "StatsdUDPPacketSize - invalid int64 value type bool"),
        ("deflate = 2.5", "ERROR: Resolve failed to coerce value 2.5 (true) for field DeflateEnabled - "
                          "invalid bool value type float64"),
        ('e2e_processing_latency_percentiles = "x"', "ERROR: Resolve failed to coerce value x ([]) for field "
         'E2EProcessingLatencyPercentiles - strconv.ParseFloat: parsing "x": invalid syntax'),
    ],
)
def test_toml_bad_values_are_resolve_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ResolveError) as info:
        parse_options(["--config", toml_file(tmp_path, text + "\n")])
    assert str(info.value) == message


def test_toml_id_error_names_go_field(tmp_path: Path) -> None:
    with pytest.raises(ResolveError, match=r"^ERROR: Resolve failed to coerce value true \(\d+\) for field ID - "
                                           "invalid int64 value type bool$"):
        parse_options(["--config", toml_file(tmp_path, "id = true\n")])


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [  # what nsqlookupd 1.3.0 answers: the same go-options and config checks as nsqd
        ("tombstone_lifetime = true", ResolveError, "ERROR: Resolve failed to coerce value true (45s) for field "
                                                    "TombstoneLifetime - invalid time.Duration value type bool"),
        ('log_level = "bogus"', ConfigError, "failed parsing log_level bogus"),
        ("log_level = 2", ConfigError, "failed parsing log_level 2"),
    ],
)
def test_lookupd_toml_errors_like_go(tmp_path: Path, text: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        parse_lookupd_options(["--config", toml_file(tmp_path, text + "\n")])
    assert str(info.value) == message


def test_lookupd_toml_values_like_go(tmp_path: Path) -> None:
    path = toml_file(tmp_path, 'log_prefix = 5\nlog_level = "debug"\ninactive_producer_timeout = 500\n')
    opts = parse_lookupd_options(["--config", path, "--tcp-address=127.0.0.1:1"])
    assert (opts.log_prefix, opts.log_level, opts.inactive_producer_timeout) == ("%!s(int64=5)", 1, 500 * MILLISECOND)
    assert opts.tcp_address == "127.0.0.1:1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('tls_required = "sometimes"', "failed parsing tls_required sometimes"),
        ("tls_required = 5", "failed parsing tls_required 5"),
        ('tls_min_version = "ssl3.0"', "failed parsing tls_min_version ssl3.0"),
        ("tls_min_version = 771", "failed parsing tls_min_version 771"),
        ('log_level = "loud"', "failed parsing log_level loud"),
        ("log_level = 2", "failed parsing log_level 2"),
    ],
)
def test_toml_special_key_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(["--config", toml_file(tmp_path, text + "\n")])
    assert str(info.value) == message


def test_bad_toml_file(tmp_path: Path) -> None:
    path = toml_file(tmp_path, "mem_queue_size = \n")
    with pytest.raises(ConfigError) as info:
        parse_options(["--config", path])
    assert str(info.value).startswith(f"failed to load config file {path} - ")


def test_missing_and_directory_config_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        parse_options([f"--config={missing}"])
    assert str(info.value) == f"failed to load config file {missing} - open {missing}: no such file or directory"
    with pytest.raises(ConfigError) as info:
        parse_options([f"--config={tmp_path}"])
    assert str(info.value) == f"failed to load config file {tmp_path} - read {tmp_path}: is a directory"


# --- Options: nsqd.New() validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node-id=1024"], "--node-id must be [0,1024)"),
        (["--node-id=-1"], "--node-id must be [0,1024)"),
        (["--max-deflate-level=0"], "--max-deflate-level must be [1,9]"),
        (["--max-deflate-level=10"], "--max-deflate-level must be [1,9]"),
        (["--tls-required"], "cannot require TLS client connections without TLS key and cert"),
        (["--tls-client-auth-policy=require"], "cannot require TLS client connections without TLS key and cert"),
        (["--auth-http-request-method=put"], "--auth-http-request-method must be post or get"),
        (["--e2e-processing-latency-percentile=1.5"], "invalid E2E processing latency percentile: 1.5"),
        (["--e2e-processing-latency-percentile=0"], "invalid E2E processing latency percentile: 0"),
        (["--e2e-processing-latency-percentile=99"], "invalid E2E processing latency percentile: 99"),
    ],
)
def test_validation_messages(args: list[str], message: str) -> None:
    with pytest.raises(InstantiateError) as info:
        parse_options(args)
    assert str(info.value) == message
    assert isinstance(info.value, OptionsError)


def test_validation_applies_to_toml_values(tmp_path: Path) -> None:
    with pytest.raises(InstantiateError, match=r"^--node-id must be \[0,1024\)$"):
        parse_options(["--config", toml_file(tmp_path, "id = 2000\n")])


def test_tls_client_auth_policy_forces_tls_required() -> None:
    opts = parse_options(["--tls-client-auth-policy=require-verify", "--tls-cert=c", "--tls-key=k"])
    assert opts.tls_required == TLS_REQUIRED
    opts = parse_options(["--tls-client-auth-policy=require", "--tls-required=tcp-https", "--tls-cert=c",
                          "--tls-key=k"])
    assert opts.tls_required == TLS_REQUIRED_EXCEPT_HTTP


# --- /config values ----------------------------------------------------------------------------------------------


def test_config_values() -> None:
    opts = parse_options(["--lookupd-tcp-address=a:4160", "--e2e-processing-latency-percentile=0.99"])
    assert opts.to_config_value("msg_timeout") == 60_000_000_000
    assert opts.to_config_value("log_level") == 2
    assert opts.to_config_value("tls_min_version") == 769
    assert opts.to_config_value("tls_required") == 0
    assert opts.to_config_value("id") == opts.node_id
    assert opts.to_config_value("nsqlookupd_tcp_addresses") == ["a:4160"]
    assert opts.to_config_value("e2e_processing_latency_percentiles") == [0.99]
    assert opts.to_config_value("snappy") is True
    assert opts.to_config_value("log_prefix") == "[nsqd] "
    json.dumps({key: opts.to_config_value(key) for key in CONFIG_KEYS})
    for key in ("queue_scan_interval", "node_id", "config", "version", "verbose", "worker_id", "show_version"):
        with pytest.raises(KeyError):
            opts.to_config_value(key)


def test_config_value_is_a_copy() -> None:
    opts = Options()
    opts.to_config_value("nsqlookupd_tcp_addresses").append("x")
    assert opts.nsqlookupd_tcp_addresses == []


def test_apply_listen_ports_and_statsd_prefix() -> None:
    opts = Options(broadcast_address="vm")
    opts.apply_listen_ports(4150, 4151)
    assert (opts.broadcast_tcp_port, opts.broadcast_http_port) == (4150, 4151)
    assert opts.to_config_value("statsd_prefix") == "nsq.vm_4151."
    opts = Options(broadcast_address="host.example", broadcast_http_port=80, statsd_prefix="stats.%s.nsqd")
    opts.apply_listen_ports(5000, 6000)
    assert (opts.broadcast_tcp_port, opts.broadcast_http_port) == (5000, 80)
    assert opts.statsd_prefix == "stats.host_example_80.nsqd."
    opts = Options(statsd_prefix="")
    opts.apply_listen_ports(None, None)
    assert (opts.broadcast_tcp_port, opts.broadcast_http_port, opts.statsd_prefix) == (0, 0, "")


def test_expand_statsd_prefix() -> None:
    assert expand_statsd_prefix("nsq.%s", "::1", 4151) == "nsq.[__1]_4151."
    assert expand_statsd_prefix("plain.", "vm", 1) == "plain."
    assert expand_statsd_prefix("%s", "10.0.0.1", 0) == "10_0_0_1_0."


# --- configs/nsqd.toml and the key list ---------------------------------------------------------------------------


def test_toml_defaults_round_trip(tmp_path: Path) -> None:
    defaults = toml_defaults()
    assert list(defaults) == list(CONFIG_KEYS)
    assert defaults["msg_timeout"] == "1m0s"
    assert defaults["log_level"] == "info"
    assert defaults["tls_min_version"] == "tls1.0"
    assert defaults["tls_required"] is False
    text = "".join(f"{key} = {json.dumps(value)}\n" for key, value in defaults.items())
    assert parse_options(["--config", toml_file(tmp_path, text)]) == Options(config=str(tmp_path / "nsqd.toml"))


def test_shipped_config_covers_every_key() -> None:
    text = CONFIG_FILE.read_text()
    active = set(tomllib.loads(text))
    commented = set(re.findall(r"^# (\w+) = ", text, re.M))
    assert active <= set(CONFIG_KEYS)
    assert commented == {"id", "broadcast_address"}
    assert active | commented == set(CONFIG_KEYS)
    for line in text.splitlines():
        if re.match(r"\w+ = ", line):
            assert text.splitlines()[text.splitlines().index(line) - 1].startswith("## "), line


def test_shipped_config_parses_to_defaults_plus_local_overrides() -> None:
    opts = parse_options(["--config", str(CONFIG_FILE)])
    expected = Options(tcp_address="127.0.0.1:4150", http_address="127.0.0.1:4151", data_path="./data",
                       config=str(CONFIG_FILE))
    assert opts == expected
    assert opts.https_address == "0.0.0.0:4152"


#: the fields of Go's `nsqd.Options` and `nsqlookupd.Options` (nsqd/options.go, nsqlookupd/options.go) that are
#: options, in struct order: go-options resolves in that order, so it decides which bad TOML value is reported
GO_NSQD_FIELDS = (
    "ID", "LogLevel", "LogPrefix", "TCPAddress", "HTTPAddress", "HTTPSAddress", "BroadcastAddress",
    "BroadcastTCPPort", "BroadcastHTTPPort", "NSQLookupdTCPAddresses", "AuthHTTPAddresses", "AuthHTTPRequestMethod",
    "HTTPClientConnectTimeout", "HTTPClientRequestTimeout", "TopologyRegion", "TopologyZone", "DataPath",
    "MemQueueSize", "MaxBytesPerFile", "SyncEvery", "SyncTimeout", "QueueScanSelectionCount",
    "QueueScanWorkerPoolMax", "MsgTimeout", "MaxMsgTimeout", "MaxMsgSize", "MaxBodySize", "MaxReqTimeout",
    "MaxHeartbeatInterval", "MaxRdyCount", "MaxOutputBufferSize", "MaxOutputBufferTimeout", "MinOutputBufferTimeout",
    "OutputBufferTimeout", "MaxChannelConsumers", "StatsdAddress", "StatsdPrefix", "StatsdInterval", "StatsdMemStats",
    "StatsdUDPPacketSize", "StatsdExcludeEphemeral", "E2EProcessingLatencyWindowTime",
    "E2EProcessingLatencyPercentiles", "TLSCert", "TLSKey", "TLSClientAuthPolicy", "TLSRootCAFile", "TLSRequired",
    "TLSMinVersion", "DeflateEnabled", "MaxDeflateLevel", "SnappyEnabled", "Experiments",
    # beyond nsqd (config/queue_settings.py, then the process-wide ones), after Go's own
    *(go_field_name(control.key) for control in queue_settings.SETTINGS), "PersistDeferred", "HTTPAuthRequired",
    "HTTPAdminIdentity", "Sigterm",
)
GO_LOOKUPD_FIELDS = (
    "LogLevel", "LogPrefix", "TCPAddress", "HTTPAddress", "BroadcastAddress", "InactiveProducerTimeout",
    "TombstoneLifetime",
)


@pytest.mark.parametrize(("options", "go_fields"), [(Options, GO_NSQD_FIELDS), (LookupdOptions, GO_LOOKUPD_FIELDS)])
def test_options_resolve_in_go_struct_order(options: type, go_fields: tuple[str, ...]) -> None:
    assert tuple(meta.go_field for _attr, meta in settings_of(options) if meta.key is not None) == go_fields


def test_first_bad_toml_value_in_go_struct_order_is_reported(tmp_path: Path) -> None:
    path = toml_file(tmp_path, 'enable_experiment = [1]\nqueue_scan_worker_pool_max = "x"\n'
                               'queue_scan_selection_count = "y"\nmem_queue_size = "z"\n')
    with pytest.raises(ResolveError, match="for field MemQueueSize "):
        parse_options(["--config", path])
