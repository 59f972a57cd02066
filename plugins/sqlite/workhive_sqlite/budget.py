"""The ``TakesBudget`` capability on SQLite: one ``BEGIN IMMEDIATE`` transaction per take.

The write lock serialises every process of the fleet on the file, so reading
the theoretical arrival times, deciding (``workhive.budgets.gcra_choose``, on
hive time) and storing the new ones is atomic. Rows are one per credential
and dimension (``NAME#fingerprint:rpm``), so the table stays a few rows.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from workhive.budgets import BudgetTake, gcra_choose
from workhive_sqlite.sqlfiles import queries

if TYPE_CHECKING:
    from workhive_sqlite.ops import Operations

__all__ = ["take_budget"]

_SELECT_ONE = queries()["budget_tats"]
_UPSERT = queries()["budget_store"]
if _SELECT_ONE.count("IN (?)") != 1:
    raise RuntimeError(f"queries.sql: budget_tats must read its keys as `IN (?)`: {_SELECT_ONE!r}")


@functools.lru_cache(maxsize=64)
def _select(keys: int) -> str:
    """``budget_tats`` for ``keys`` keys: its one ``?`` repeated (a take names one to a few keys)."""
    return _SELECT_ONE.replace("IN (?)", "IN (" + ", ".join("?" * keys) + ")")


def take_budget(ops: Operations, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
    """Run on a connection's thread (``SqliteStorage._run``): reserve the soonest choice within ``max_wait``."""
    return ops.write(_take, ops, choices, max_wait)


def _take(ops: Operations, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
    now = ops.clock()
    keys = sorted({take.key for takes in choices for take in takes})
    tats: dict[str, float] = {}
    if keys:
        rows = ops.conn.execute(_select(len(keys)), keys)
        tats = {str(key): float(tat) for key, tat in rows}
    index, wait, new = gcra_choose(tats, now, choices, max_wait)
    if new:
        ops.conn.executemany(_UPSERT, list(new.items()))
    return index, wait
