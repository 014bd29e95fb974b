"""nsq_to_file's file names: the template rules, <REV>, and --datetime-format rendered the Go way."""

from __future__ import annotations

import datetime as dt

import pytest

from nsqd_py.tools.filenames import MISSING_REV, filename_template, with_rev
from nsqd_py.tools.strftime import go_format, strftime, to_go_layout

DEFAULT = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
UTC = dt.UTC


def test_default_format_drops_rev_without_gzip_or_rotation() -> None:
    assert filename_template(DEFAULT, "ftest", hostname="vm") == "ftest.vm.<DATETIME>.log"


def test_gzip_keeps_rev_and_appends_gz() -> None:
    template = filename_template(DEFAULT, "ftest", gzip=True, hostname="vm")
    assert template == "ftest.vm<REV>.<DATETIME>.log.gz"
    assert with_rev(template, 0) == "ftest.vm-000000.<DATETIME>.log.gz"
    assert with_rev(template, 12) == "ftest.vm-000012.<DATETIME>.log.gz"
    assert filename_template("<TOPIC><REV>.gz", "t", gzip=True, hostname="vm") == "t<REV>.gz"


def test_host_is_the_short_hostname_or_the_identifier() -> None:
    assert filename_template(DEFAULT, "t", hostname="web1.dc.example.com") == "t.web1.<DATETIME>.log"
    assert filename_template(DEFAULT, "t", hostname="web1.dc.example.com",
                             host_identifier="<SHORT_HOST>-<HOSTNAME>") == "t.web1-web1.dc.example.com.<DATETIME>.log"
    assert filename_template("<TOPIC>.<PID>.log", "t", hostname="h", pid=42) == "t.42.log"


@pytest.mark.parametrize("kwargs", [{"gzip": True}, {"needs_rev": True}])
def test_rev_is_mandatory_with_gzip_rotation_or_work_dir(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="missing <REV> in --filename-format when gzip, rotation, or work dir"):
        filename_template("<TOPIC>.<DATETIME>.log", "t", hostname="h", **kwargs)
    assert MISSING_REV == "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"


def test_strftime_to_go_layout() -> None:
    assert to_go_layout("%Y-%m-%d_%H") == "2006-01-02_15"
    assert to_go_layout("%a %A %b %B %I %M %S %p %y %Z %z %% %q") == \
        "Mon Monday Jan January 03 04 05 PM 06 MST -0700 % %q"


def test_go_format_of_the_default_and_other_directives() -> None:
    t = dt.datetime(2026, 11, 2, 6, 9, 3, 120000, tzinfo=UTC)
    assert strftime("%Y-%m-%d_%H", t) == "2026-11-02_06"
    assert strftime("%y%m%d %I:%M:%S %p %Z %z", t) == "261102 06:09:03 AM UTC +0000"
    assert strftime("%a %A %b %B %%", t) == "Mon Monday Nov November %"
    pm = dt.datetime(2026, 11, 2, 18, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30)))
    assert strftime("%I%p %z", pm) == "06PM -0530"


def test_literal_text_is_read_as_a_go_layout_like_the_go_tool() -> None:
    """Text outside the % directives goes through Go's time.Format too."""
    t = dt.datetime(2026, 11, 2, 6, 9, 3, 120000, tzinfo=UTC)
    assert go_format("log-Jan_2", t) == "log-Nov 2"
    assert go_format("run15", t) == "run06"
    assert go_format("x.000", t) == "x.120"
    assert go_format("x.999", t) == "x.12"
    assert go_format("Z07:00", t) == "Z"
    assert go_format("Monthly", t) == "Monthly"  # "Mon" before a lower-case letter is literal
    assert go_format("_2006", t) == "_2026"
