"""Three supervisors' fire loops (three threads, each with its own hive handle on one store):
each schedule tick is pushed exactly once (rules SC3, SC4; workhive.testing.schedules)."""

from __future__ import annotations

import workhive
from workhive.testing.clock import ManualClock
from workhive.testing.schedules import check_each_tick_pushed_once, three_firers

ROUNDS = 6


def test_three_firers_on_one_postgres_schema_push_each_tick_once(url: str) -> None:
    """[SC4] three handles (own connection pools, own threads) on one schema, firing at the same moments.

    The server's clock keeps running under the offset; each round moves it a whole minute, and
    under the skip policy each schedule has exactly one tick to push however long a round takes.
    """
    clock = ManualClock()
    run = three_firers(lambda: workhive.open(url, clock_offset=clock.offset), clock, rounds=ROUNDS)
    check_each_tick_pushed_once(run, ROUNDS)
