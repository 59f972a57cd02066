"""Autoscaling: how many worker processes a fleet should run, from what it observes.

``workhive work --processes auto`` (or ``auto:MIN-MAX``) lets the supervisor
grow and shrink its worker processes with the backlog, and, where the
credentials carry rate budgets (``workhive.budgets``), never past what the
keys can feed. Every decision is ``decide(ScaleInputs(...))``: a pure
function of the observed inputs, so it is tested without clocks or
processes; the supervisor only gathers the inputs and applies the answer.

The keys' bound is Little's law: a fleet spending ``rate`` calls per second
on calls that take ``call_seconds`` each keeps ``rate * call_seconds``
workers busy; more workers would only wait for budget. The same rate gives
``admissible_items``, the ready items the budgets let through over the next
minute: the ``workhive_admissible_items`` metric an external autoscaler
(KEDA, ``docs/autoscaling.md``) scales on.

>>> decide(ScaleInputs(ready=40, target=1, low=1, high=8, per_process=4, idle_for=0.0, since_scale_up=10.0))
ScaleDecision(target=2, reason='backlog of 40 ready items for 1 process(es) x 4')
>>> decide(ScaleInputs(ready=40, target=4, low=1, high=8, per_process=4, idle_for=0.0, since_scale_up=10.0,
...                    budget_processes=2)).target
2
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable

import attrs

from workhive.budgets import Budget
from workhive.errors import InvalidArgument

__all__ = [
    "ADMIT_HORIZON",
    "SCALE_DOWN_IDLE",
    "SCALE_UP_EVERY",
    "ScaleDecision",
    "ScaleInputs",
    "admissible_items",
    "budget_processes",
    "budget_rate",
    "decide",
    "parse_processes",
]

#: seconds between two steps up (a new process needs a moment before it takes items)
SCALE_UP_EVERY = 2.0
#: seconds without a ready item before one process is retired (and again after each)
SCALE_DOWN_IDLE = 5.0
#: the seconds of budget ``admissible_items`` counts
ADMIT_HORIZON = 60.0

_AUTO = re.compile(r"auto(?::(\d+)-(\d+))?")


def parse_processes(value: str | int, cpu_count: int | None = None) -> tuple[int, int | None]:
    """``--processes``: a count ``N`` -> ``(N, None)``; ``auto`` or ``auto:MIN-MAX`` -> ``(MIN, MAX)``.

    ``auto`` alone scales between 1 and the CPU count.

    >>> parse_processes("4"), parse_processes("auto:2-6"), parse_processes("auto", cpu_count=8)
    ((4, None), (2, 6), (1, 8))
    >>> parse_processes("auto:5-2")
    Traceback (most recent call last):
    ...
    workhive.errors.InvalidArgument: --processes auto:5-2: MIN (5) is larger than MAX (2); write auto:2-5
    """
    text = str(value).strip()
    if text.isdigit():
        count = int(text)
        if count < 1:
            raise InvalidArgument(f"--processes {text}: at least 1 (or auto, auto:MIN-MAX)", processes=value)
        return count, None
    match = _AUTO.fullmatch(text)
    if match is None:
        raise InvalidArgument(
            f"--processes {text!r} is not a count, auto or auto:MIN-MAX (e.g. 4, auto, auto:2-8)", processes=value
        )
    if match.group(1) is None:
        return 1, max(1, cpu_count if cpu_count is not None else (os.cpu_count() or 1))
    low, high = int(match.group(1)), int(match.group(2))
    if low < 1:
        raise InvalidArgument(f"--processes {text}: MIN must be at least 1, e.g. auto:1-{max(1, high)}")
    if low > high:
        raise InvalidArgument(f"--processes {text}: MIN ({low}) is larger than MAX ({high}); write auto:{high}-{low}")
    return low, high


def budget_rate(budgets: Iterable[Budget | None], token_estimate: float = 0.0) -> float | None:
    """Calls per second the keys' budgets allow together; None when some key is unbounded (or there is none).

    A key's rate is its rpm, or its tpm over ``token_estimate`` tokens a call,
    whichever is lower; a key with neither (or tpm alone and no estimate) is
    not bounded, and neither is a fleet that has one.

    >>> budget_rate([Budget(rpm=60), Budget(rpm=120, tpm=6000)], token_estimate=1000)
    1.1
    >>> budget_rate([Budget(rpm=60), None]) is None
    True
    """
    total = 0.0
    seen = False
    for budget in budgets:
        if budget is None:
            return None
        rates = []
        if budget.rpm is not None:
            rates.append(budget.rpm / 60.0)
        if budget.tpm is not None and token_estimate > 0:
            rates.append(budget.tpm / 60.0 / token_estimate)
        if not rates:
            return None
        total += min(rates)
        seen = True
    return total if seen else None


def budget_processes(rate: float | None, call_seconds: float | None, concurrency: int) -> int | None:
    """Processes the keys can feed: ``ceil(rate * call_seconds)`` workers, ``concurrency`` a process.

    Before any call has been timed (``call_seconds`` None) that is one worker.

    >>> budget_processes(2.0, 3.0, concurrency=2), budget_processes(2.0, None, 4), budget_processes(None, 1.0, 1)
    (3, 1, None)
    """
    if rate is None:
        return None
    workers = max(1, math.ceil(rate * call_seconds - 1e-9)) if call_seconds is not None else 1
    return max(1, math.ceil(workers / max(1, concurrency)))


def admissible_items(ready: int, rate: float | None, horizon: float = ADMIT_HORIZON) -> int:
    """Ready items the budgets let through within ``horizon`` seconds (all of them without a budget bound).

    >>> admissible_items(500, 1.0), admissible_items(500, None), admissible_items(10, 1.0)
    (60, 500, 10)
    """
    if rate is None:
        return max(0, ready)
    return max(0, min(ready, math.floor(rate * horizon)))


@attrs.frozen
class ScaleInputs:
    """What the supervisor observed: the backlog, its processes, how long idle, and the keys' bound.

    ``per_process``: items one process works at once (concurrency x batch);
    ``idle_for``: seconds the pool has had no ready item (0 while it has);
    ``since_scale_up``: seconds since the last step up; ``budget_processes``:
    what the keys can feed (``budget_processes``), None when unbounded.
    """

    ready: int
    target: int
    low: int
    high: int
    per_process: int
    idle_for: float
    since_scale_up: float
    budget_processes: int | None = None


@attrs.frozen
class ScaleDecision:
    """The number of processes to run, and why (for the log)."""

    target: int
    reason: str


def decide(inputs: ScaleInputs) -> ScaleDecision:
    """The next target: grow toward the backlog (at most doubling a step), shrink by one when idle,
    never outside ``low..high`` nor past what the keys can feed (down at once when they became the limit).

    >>> decide(ScaleInputs(ready=0, target=3, low=1, high=8, per_process=1, idle_for=6.0, since_scale_up=60.0))
    ScaleDecision(target=2, reason='idle for 6s')
    """
    i = inputs
    cap = i.high if i.budget_processes is None else max(i.low, min(i.high, i.budget_processes))
    target = max(i.low, min(i.target, cap))
    if target < i.target:
        return ScaleDecision(target, f"the keys' budgets feed {cap} process(es)")
    if i.ready > 0:
        want = math.ceil(i.ready / max(1, i.per_process))
        if want > target and target < cap and i.since_scale_up >= SCALE_UP_EVERY:
            grown = min(cap, want, 2 * target)
            return ScaleDecision(grown, f"backlog of {i.ready} ready items for {target} process(es) x {i.per_process}")
        return ScaleDecision(target, "steady")
    if i.idle_for >= SCALE_DOWN_IDLE and target > i.low:
        return ScaleDecision(target - 1, f"idle for {i.idle_for:.0f}s")
    return ScaleDecision(target, "steady")
