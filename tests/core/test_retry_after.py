"""Retry-After parsing: seconds, HTTP-dates, garbage, negative and huge values."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workhive.retry_after import parse_retry_after

NOW = 1_700_000_000.0  # a fixed "now" so date arithmetic is exact


@pytest.mark.parametrize(
    ("value", "expected"),
    [("120", 120.0), ("0", 0.0), (" 7 ", 7.0), (b"3", 3.0), ("1.5", 1.5), (45, 45.0), (2.5, 2.5)],
)
def test_seconds(value: object, expected: float) -> None:
    assert parse_retry_after(value, now=NOW) == expected  # type: ignore[arg-type]


def test_http_date_in_the_future() -> None:
    when = datetime.fromtimestamp(NOW + 90, tz=timezone.utc)
    assert parse_retry_after(format_datetime(when, usegmt=True), now=NOW) == pytest.approx(90.0)


def test_http_date_rfc_example() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0


def test_http_date_with_unknown_zone_is_utc() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 -0000", now=1445412470.0) == 10.0


def test_http_date_in_the_past_means_now() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=NOW) == 0.0


@pytest.mark.parametrize(
    "garbage",
    [None, "", "   ", "soon", "12s", "1e3", "0x10", "Mon, 99 Foo 2015", "2015-10-21T07:28:00Z", b"\xff\xfe", True, [1]],
)
def test_garbage_is_none(garbage: object) -> None:
    assert parse_retry_after(garbage, now=NOW) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("negative", ["-5", "-0.5", " - 3", -5, -0.1, math.nan])
def test_negative_is_none_not_zero(negative: object) -> None:
    # A bad server must not be able to make the fleet retry at once.
    assert parse_retry_after(negative, now=NOW) is None  # type: ignore[arg-type]


def test_huge_is_returned_for_the_caller_to_clamp() -> None:
    assert parse_retry_after("99999999999", now=NOW) == 99999999999.0
    assert parse_retry_after("9" * 400, now=NOW) == math.inf


def test_defaults_to_the_current_time() -> None:
    when = datetime.fromtimestamp(datetime.now(tz=timezone.utc).timestamp() + 3600, tz=timezone.utc)
    parsed = parse_retry_after(format_datetime(when, usegmt=True))
    assert parsed is not None and 3500 < parsed <= 3600


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_never_raises_and_never_negative(text: str) -> None:
    parsed = parse_retry_after(text, now=NOW)
    assert parsed is None or parsed >= 0


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0, max_value=10**12))
def test_integer_seconds_round_trip(seconds: int) -> None:
    assert parse_retry_after(str(seconds), now=NOW) == float(seconds)
