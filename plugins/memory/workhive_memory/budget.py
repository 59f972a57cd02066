"""The ``TakesBudget`` capability in process memory: GCRA over a dict, atomic because nothing awaits inside.

>>> import asyncio
>>> from workhive.budgets import BudgetTake
>>> backend = MemoryStorage("memory://")  # doctest: +SKIP
>>> asyncio.run(backend.take_budget([[BudgetTake("k:rpm", 1.0, 1.0, 1.0)]], 0.0))  # doctest: +SKIP
(0, 0.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from workhive.budgets import BudgetTake, gcra_choose

__all__ = ["MemoryBudgets"]


class MemoryBudgets:
    """Mixin for ``MemoryStorage``: theoretical arrival times per budget key, in the shared store."""

    _clock: Callable[[], float]
    _budget_tats: dict[str, float]

    async def take_budget(self, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
        """Reserve the choice that can go soonest, if within ``max_wait`` (see ``workhive.budgets.TakesBudget``)."""
        now = self._clock()
        tats = self._budget_tats
        keys = {take.key for takes in choices for take in takes}
        index, wait, new = gcra_choose({k: tats[k] for k in keys if k in tats}, now, choices, max_wait)
        tats.update(new)
        if len(tats) > 4096:  # keys whose schedule lies in the past hold nothing back: forget them
            for key in [k for k, tat in tats.items() if tat < now]:
                del tats[key]
        return index, (0.0 if math.isclose(wait, 0.0, abs_tol=1e-12) else wait)
