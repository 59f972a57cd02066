"""Redis against the rate-budget contract: one script per take, on the server's clock, several processes."""

from __future__ import annotations

import pathlib
from typing import Any

from redis_server import new_prefix, url_for
from workhive_redis import RedisStorage

from workhive.testing.budgets import BudgetContract
from workhive.testing.clock import ManualClock

_prefixes: dict[pathlib.Path, str] = {}


def _prefix(tmp_path: pathlib.Path) -> str:
    """One prefix per test directory: two backends of one test share the hive."""
    prefix = _prefixes.get(tmp_path)
    if prefix is None:
        prefix = _prefixes[tmp_path] = new_prefix()
    return prefix


class TestRedisBudgetContract(BudgetContract):
    """On the server's own clock (TIME + the suite's offset): the clock every process of a fleet shares."""

    def make_backend(self, clock: ManualClock, tmp_path: pathlib.Path) -> RedisStorage:
        return RedisStorage(url_for(_prefix(tmp_path)), clock_offset=clock.offset)

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        return url_for(_prefix(tmp_path)), {}
