"""Input checks shared by the facade and backends."""

from __future__ import annotations

import math

import pytest

from workhive.errors import ConfigError, InvalidArgument, InvalidItem, InvalidName
from workhive.urls import parse_spec, scheme_of, url_query
from workhive.validation import check_count, check_name, check_nonnegative, check_positive, to_json


@pytest.mark.parametrize(
    "value", [{1, 2}, object(), math.nan, math.inf, {"k": -math.inf}, b"bytes", {"nested": [object()]}]
)
def test_non_json_values_are_refused_with_a_hint(value: object) -> None:
    with pytest.raises(InvalidItem, match="JSON-serialisable"):
        to_json(value)


def test_json_is_compact_and_keeps_unicode() -> None:
    assert to_json({"a": [1, 2.5, None, True], "é": "ü"}) == '{"a":[1,2.5,null,true],"é":"ü"}'


@pytest.mark.parametrize("name", ["a", "pool-1", "A.b_c:d-e", "x" * 200, "9lives"])
def test_valid_names(name: str) -> None:
    assert check_name("pool", name) == name


@pytest.mark.parametrize("name", ["", "-lead", ".hidden", "has space", "x" * 201, "a/b", "naïve", None, 3])
def test_invalid_names_say_what_is_allowed(name: object) -> None:
    with pytest.raises(InvalidName, match="letters, digits"):
        check_name("pool", name)


@pytest.mark.parametrize("value", [-1, -0.001, math.nan, math.inf, "1", True])
def test_nonnegative(value: object) -> None:
    with pytest.raises(InvalidArgument, match="delay must be"):
        check_nonnegative("delay", value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -5, math.nan])
def test_positive(value: float) -> None:
    with pytest.raises(InvalidArgument, match="lease must be"):
        check_positive("lease", value)


@pytest.mark.parametrize("value", [0, -1, 2**31, 1.5, True])
def test_count(value: object) -> None:
    with pytest.raises(InvalidArgument, match="n must be an integer"):
        check_count("n", value)  # type: ignore[arg-type]


def test_scheme_parsing() -> None:
    assert scheme_of("SQLite:///x.db") == "sqlite"
    assert scheme_of("memory://") == "memory"
    for bad in ["no-scheme", "", "://x", "1abc://x", None]:
        with pytest.raises(ConfigError):
            scheme_of(bad)


def test_spec_parsing() -> None:
    assert parse_spec("none") == ("none", {})
    assert parse_spec(" constant?delay=2 ") == ("constant", {"delay": "2"})
    with pytest.raises(ConfigError):
        parse_spec("")
    with pytest.raises(ConfigError, match="malformed"):
        parse_spec("x?novalue")


def test_url_query() -> None:
    assert url_query("sqlite:///a.db?synchronous=full&busy_timeout=10") == {"synchronous": "full", "busy_timeout": "10"}
    with pytest.raises(ConfigError):
        url_query("sqlite:///a.db?broken")
