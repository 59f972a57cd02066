"""Three supervisors' fire loops (three threads, each with its own hive handle on one store):
each schedule tick is pushed exactly once (rules SC3, SC4; workhive.testing.schedules)."""

from __future__ import annotations

from redis_server import new_prefix, url_for

import workhive
from workhive.testing.clock import ManualClock
from workhive.testing.schedules import check_each_tick_pushed_once, three_firers

ROUNDS = 6


def test_three_firers_on_one_redis_prefix_push_each_tick_once() -> None:
    """[SC4] three handles (own connections, own threads) on one prefix, firing at the same moments."""
    clock = ManualClock()
    url = url_for(new_prefix())
    run = three_firers(lambda: workhive.open(url, clock=clock), clock, rounds=ROUNDS)
    check_each_tick_pushed_once(run, ROUNDS)
