"""Query parsing as Go's url.ParseQuery does it (unit level; the HTTP tests cover the answers nsqd gives)."""

from __future__ import annotations

import pytest

from nsqd_py.web.params import parse_query


@pytest.mark.parametrize(("raw", "expected"), [
    ("topic=plain_name", {"topic": ["plain_name"]}),
    ("a=b+c&a=%41%2b", {"a": ["b c", "A+"]}),
    ("t=caf\xc3\xa9", {"t": ["café"]}),  # WSGI hands the wire bytes over as latin-1
    ("t=\xff", {"t": ["\udcff"]}),  # invalid UTF-8 survives as a surrogate, which no name check passes
    ("&&k=&=v", {"k": [""], "": ["v"]}),
    ("flag", {"flag": [""]}),
])
def test_parse_query(raw: str, expected: dict[str, list[str]]) -> None:
    assert parse_query(raw) == expected


@pytest.mark.parametrize(("raw", "message"), [
    ("a=%zz", 'invalid URL escape "%zz"'),
    ("a=%4", 'invalid URL escape "%4"'),
    ("a=1;b=2", "invalid semicolon separator in query"),
])
def test_parse_query_errors(raw: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_query(raw)
    assert str(err.value) == message
