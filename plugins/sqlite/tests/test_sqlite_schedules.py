"""Three supervisors' fire loops (three threads, each with its own hive handle on one store):
each schedule tick is pushed exactly once (rules SC3, SC4; workhive.testing.schedules)."""

from __future__ import annotations

import pathlib

import workhive
from workhive.testing.clock import ManualClock
from workhive.testing.schedules import check_each_tick_pushed_once, three_firers

ROUNDS = 6


def test_three_firers_on_one_sqlite_file_push_each_tick_once(tmp_path: pathlib.Path) -> None:
    """[SC4] three handles (own connections, own threads) on one file, firing at the same moments."""
    clock = ManualClock()
    url = f"sqlite:///{tmp_path}/hive.db"
    run = three_firers(lambda: workhive.open(url, clock=clock), clock, rounds=ROUNDS)
    check_each_tick_pushed_once(run, ROUNDS)
