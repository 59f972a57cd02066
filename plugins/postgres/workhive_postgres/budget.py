"""The ``TakesBudget`` capability on PostgreSQL: one transaction per take, on the server's clock.

The keys' rows are locked (``FOR UPDATE``, in key order) for the decision,
so takes from every process of every machine are serialised per key; the
decision itself is ``workhive.budgets.gcra_choose``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workhive.budgets import BudgetTake, gcra_choose

__all__ = ["take_budget"]


async def take_budget(
    conn: Any,
    q: Mapping[str, str],
    offset: Callable[[], float],
    choices: Sequence[Sequence[BudgetTake]],
    max_wait: float,
) -> tuple[int, float]:
    """Reserve the soonest of ``choices`` within ``max_wait`` over asyncpg connection ``conn``.

    ``q`` is the statements by name (``sqlfiles.queries()``); ``offset`` the
    clock offset added to the server's time. Run by ``PostgresStorage._run``,
    which runs it again after a dropped connection: at worst a slot is
    reserved twice, which spends budget and never exceeds it.
    """
    keys = sorted({take.key for takes in choices for take in takes})
    async with conn.transaction():
        tats: dict[str, float] = {}
        if keys:
            await conn.execute(q["budget_rows"], keys)
            tats = {row[0]: float(row[1]) for row in await conn.fetch(q["budget_lock"], keys)}
        # Read after the locks are held: the decision is made at this moment.
        now = float(await conn.fetchval(q["now"], offset()))
        index, wait, new = gcra_choose(tats, now, choices, max_wait)
        if new:
            await conn.execute(q["budget_store"], list(new), list(new.values()))
    return index, wait
