"""The ``TakesBudget`` capability on SQLite: one ``BEGIN IMMEDIATE`` transaction per take.

The write lock serialises every process of the fleet on the file, so reading
the theoretical arrival times, deciding (``workhive.budgets.gcra_choose``, on
hive time) and storing the new ones is atomic. Rows are one per credential
and dimension (``NAME#fingerprint:rpm``), so the table stays a few rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from workhive.budgets import BudgetTake, gcra_choose

if TYPE_CHECKING:
    from workhive_sqlite.ops import Operations

__all__ = ["take_budget"]

_SELECT = "SELECT key, tat FROM budgets WHERE key IN ({marks})"
_UPSERT = "INSERT INTO budgets (key, tat) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET tat = excluded.tat"


def take_budget(ops: Operations, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
    """Run on a connection's thread (``SqliteStorage._run``): reserve the soonest choice within ``max_wait``."""
    return ops.write(_take, ops, choices, max_wait)


def _take(ops: Operations, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
    now = ops.clock()
    keys = sorted({take.key for takes in choices for take in takes})
    tats: dict[str, float] = {}
    if keys:
        rows = ops.conn.execute(_SELECT.format(marks=", ".join("?" * len(keys))), keys)
        tats = {str(key): float(tat) for key, tat in rows}
    index, wait, new = gcra_choose(tats, now, choices, max_wait)
    if new:
        ops.conn.executemany(_UPSERT, list(new.items()))
    return index, wait
