"""The ``TakesBudget`` capability on Redis: one script (``lua/take_budget-1.lua``) per take.

The script runs atomically on the server, on the server's clock, so takes
from every process of every machine are serialised; it applies the same
GCRA decision as ``workhive.budgets.gcra_choose``, in Lua.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workhive.budgets import BudgetTake
from workhive.errors import InvalidArgument
from workhive_redis.connections import RedisClient

__all__ = ["take_budget"]


def _num(value: float) -> str:
    return repr(float(value))  # reads back as exactly the same float (Lua's tonumber)


async def take_budget(
    client: RedisClient, tats_key: str, clock: str, choices: Sequence[Sequence[BudgetTake]], max_wait: float
) -> tuple[int, float]:
    """Reserve the soonest of ``choices`` within ``max_wait`` in the hash ``tats_key``.

    ``clock`` is what scripts take as their clock (``RedisStorage._off()``, see
    ``lua/includes/clock.lua``).
    """
    if not choices:
        raise InvalidArgument("take_budget needs at least one choice")
    # Lua's tonumber need not read 'inf': any wait is below 1e308 seconds.
    args: list[Any] = [clock, _num(min(max_wait, 1e308)), len(choices)]
    for takes in choices:
        args.append(len(takes))
        for take in takes:
            args.extend((take.key, _num(take.interval), _num(take.tolerance), _num(take.cost)))
    index, wait = await client.run("take_budget", (tats_key,), args)
    return int(index), float(wait)
