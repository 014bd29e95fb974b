"""nsqadmin's page filters: the cached `urlencode` answers exactly what Jinja's own filter answers for a string."""

from __future__ import annotations

import jinja2
import pytest

from nsqd_py.admin.pages import duration, number, path_segment


@pytest.mark.parametrize("name", ["events", "orders#ephemeral", "a b", "x/y", "é%&?=", ""])
def test_path_segment_is_jinjas_urlencode(name: str) -> None:
    jinja = jinja2.Environment(autoescape=True).from_string("{{ name | urlencode }}")
    assert path_segment(name) == jinja.render(name=name)


def test_numbers_and_durations_read_at_a_glance() -> None:
    assert (number(1234567), number(2.5), number("-")) == ("1,234,567", "2.5", "-")
    assert [duration(ns) for ns in (0, 500, 42_000, 250 * 10**6, 4 * 10**9, 3723 * 10**9)] == [
        "0s", "500ns", "42µs", "250ms", "4.0s", "1h2m3s"]

