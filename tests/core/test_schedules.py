"""``workhive.schedules``: ticks, time zones and the misfire policy, without a backend.

The commands and the facade on a real hive: tests/integration/test_schedules_cli.py.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from workhive.errors import InvalidArgument
from workhive.schedules import Schedule, due_ticks, parse_every

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def at(*args: int) -> float:
    return dt.datetime(*args, tzinfo=BERLIN).timestamp()


def cron(expression: str, created_at: float, *, last_tick: float | None = None, catch_up: int = 0) -> Schedule:
    return Schedule("s", "p", expression, None, "Europe/Berlin", "null", catch_up, created_at, last_tick)


def test_cron_ticks_follow_the_wall_clock_of_their_zone_across_dst() -> None:
    # 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer (clocks go forward on 29 March 2026).
    schedule = cron("0 9 * * *", at(2026, 3, 28, 12, 0))
    first = schedule.next_tick()
    second = schedule.fired(first).next_tick()
    assert first == at(2026, 3, 29, 9, 0)
    assert dt.datetime.fromtimestamp(first, dt.timezone.utc).hour == 7
    assert second - first == 86400.0
    before = cron("0 9 * * *", at(2026, 3, 27, 12, 0)).next_tick()
    assert dt.datetime.fromtimestamp(before, dt.timezone.utc).hour == 8
    assert first - before == 86400.0 - 3600.0  # the day the clocks went forward is an hour short


def test_due_ticks_skip_to_now_or_catch_up_the_latest_n() -> None:
    created = at(2026, 1, 1, 0, 0, 30)
    assert due_ticks(cron("*/5 * * * *", created), at(2026, 1, 1, 0, 4)) == []
    assert due_ticks(cron("*/5 * * * *", created), at(2026, 1, 1, 0, 5)) == [at(2026, 1, 1, 0, 5)]
    later = at(2026, 1, 1, 1, 2)
    assert due_ticks(cron("*/5 * * * *", created), later) == [at(2026, 1, 1, 1, 0)]
    assert due_ticks(cron("*/5 * * * *", created, catch_up=3), later) == [
        at(2026, 1, 1, 0, 50),
        at(2026, 1, 1, 0, 55),
        at(2026, 1, 1, 1, 0),
    ]
    # Fired through 00:55: only the one after it is due, whatever the policy.
    assert due_ticks(cron("*/5 * * * *", created, last_tick=at(2026, 1, 1, 0, 55), catch_up=3), later) == [
        at(2026, 1, 1, 1, 0)
    ]


def test_a_year_of_downtime_costs_no_more_than_a_minute() -> None:
    created = at(2025, 1, 1, 0, 0)
    ticks = due_ticks(cron("* * * * *", created, catch_up=2), at(2026, 1, 1, 0, 0, 30))
    assert ticks == [at(2025, 12, 31, 23, 59), at(2026, 1, 1, 0, 0)]
    every = Schedule("e", "p", None, 1.0, "UTC", "null", 4, 0.0, None)
    assert due_ticks(every, 365 * 86400.0 + 0.5) == [365 * 86400.0 - k for k in (3, 2, 1, 0)]


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30.0), ("5m", 300.0), ("2h", 7200.0), ("1d", 86400.0)])
def test_every_reads_durations(text: str, seconds: float) -> None:
    assert parse_every(text) == seconds


@pytest.mark.parametrize("text", ["0", "0s", "500ms", "soon", "-5s", ""])
def test_every_refuses_what_is_not_a_duration_of_a_second_or_more(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_every(text)
