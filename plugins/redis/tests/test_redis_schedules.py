"""Three supervisors' fire loops (three threads, each with its own hive handle on one store):
each schedule tick is pushed exactly once (rules SC3, SC4; workhive.testing.schedules)."""

from __future__ import annotations

from redis_server import new_prefix, url_for

import workhive
from workhive.testing.clock import ManualClock
from workhive.testing.schedules import FiringRun, three_firers

ROUNDS = 6


def check(run: FiringRun) -> None:
    for r, per_firer in enumerate(run.rounds):
        ticks = [(f.schedule, f.tick) for fired in per_firer for f in fired]
        # Every round moved the clock a minute: each schedule has one tick due, pushed by one firer.
        assert sorted(s for s, _ in ticks) == ["cron-minute", "every-minute"], f"round {r}: {per_firer}"
    every = [f.tick for round_ in run.rounds for fired in round_ for f in fired if f.schedule == "every-minute"]
    assert len(set(every)) == ROUNDS
    assert run.items == {"sched-every": ["every"] * ROUNDS, "sched-cron": ["cron"] * ROUNDS}


def test_three_firers_on_one_redis_prefix_push_each_tick_once() -> None:
    """[SC4] three handles (own connections, own threads) on one prefix, firing at the same moments."""
    clock = ManualClock()
    url = url_for(new_prefix())
    check(three_firers(lambda: workhive.open(url, clock=clock), clock, rounds=ROUNDS))
