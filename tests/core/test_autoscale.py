"""``workhive.autoscale``: every scaling decision from observed inputs, no clocks or processes."""

from __future__ import annotations

import pytest

from workhive.autoscale import (
    SCALE_DOWN_IDLE,
    SCALE_UP_EVERY,
    ScaleInputs,
    admissible_items,
    budget_processes,
    budget_rate,
    decide,
    parse_processes,
)
from workhive.budgets import Budget
from workhive.errors import InvalidArgument


def inputs(**changes: object) -> ScaleInputs:
    base: dict[str, object] = dict(
        ready=0, target=2, low=1, high=8, per_process=2, idle_for=0.0, since_scale_up=SCALE_UP_EVERY
    )
    base.update(changes)
    return ScaleInputs(**base)  # type: ignore[arg-type]


def test_a_backlog_beyond_the_processes_grows_them_at_most_doubling() -> None:
    assert decide(inputs(ready=100, target=2)).target == 4
    assert decide(inputs(ready=100, target=4)).target == 8
    assert decide(inputs(ready=100, target=8)).target == 8  # at the top
    assert decide(inputs(ready=5, target=2)).target == 3  # 5 items at 2 a process: 3 processes


def test_growth_waits_between_steps() -> None:
    assert decide(inputs(ready=100, since_scale_up=SCALE_UP_EVERY / 2)).target == 2


def test_a_backlog_the_processes_can_take_keeps_them() -> None:
    assert decide(inputs(ready=4, target=2, per_process=2)).target == 2


def test_idle_shrinks_one_step_after_the_idle_period_never_below_min() -> None:
    assert decide(inputs(idle_for=SCALE_DOWN_IDLE - 0.1)).target == 2
    assert decide(inputs(idle_for=SCALE_DOWN_IDLE)).target == 1
    assert decide(inputs(target=1, idle_for=SCALE_DOWN_IDLE * 10)).target == 1


def test_the_keys_bound_caps_growth_and_shrinks_at_once() -> None:
    assert decide(inputs(ready=1000, target=1, budget_processes=2)).target == 2
    assert decide(inputs(ready=1000, target=2, budget_processes=2)).target == 2
    shrunk = decide(inputs(ready=1000, target=6, budget_processes=3, since_scale_up=0.0))
    assert shrunk.target == 3 and "budgets" in shrunk.reason


def test_the_keys_bound_never_goes_below_min() -> None:
    assert decide(inputs(ready=1000, target=3, low=3, budget_processes=1)).target == 3


def test_budget_rate_sums_the_keys_and_takes_each_keys_tighter_limit() -> None:
    assert budget_rate([Budget(rpm=60), Budget(rpm=30)]) == pytest.approx(1.5)
    assert budget_rate([Budget(rpm=600, tpm=60_000)], token_estimate=2000) == pytest.approx(0.5)
    assert budget_rate([Budget(tpm=60_000)]) is None  # tokens per call unknown: no bound
    assert budget_rate([Budget(rpm=60), Budget()]) is None  # one unbounded key: no bound
    assert budget_rate([]) is None


def test_budget_processes_is_littles_law_per_process() -> None:
    assert budget_processes(1.0, 0.05, concurrency=1) == 1
    assert budget_processes(10.0, 0.5, concurrency=1) == 5
    assert budget_processes(10.0, 0.5, concurrency=2) == 3
    assert budget_processes(10.0, None, concurrency=1) == 1  # no call timed yet: one worker
    assert budget_processes(None, 0.5, concurrency=1) is None


def test_admissible_items_is_what_the_budgets_let_through_in_a_minute() -> None:
    assert admissible_items(1000, 0.5) == 30
    assert admissible_items(12, 0.5) == 12
    assert admissible_items(1000, None) == 1000
    assert admissible_items(0, 2.0) == 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [("3", (3, None)), ("auto:2-5", (2, 5)), ("auto:4-4", (4, 4)), ("auto", (1, 6))],
)
def test_parse_processes(value: str, expected: tuple[int, int | None]) -> None:
    assert parse_processes(value, cpu_count=6) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("auto:5-2", "MIN \\(5\\) is larger than MAX \\(2\\)"),
        ("auto:0-2", "at least 1"),
        ("0", "at least 1"),
        ("auto:2", "not a count"),
        ("many", "not a count"),
    ],
)
def test_bad_processes_are_refused(value: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_processes(value)
