"""The ``StoresSchedules`` capability in process memory: a dict of schedules in the shared store.

Firing is atomic because nothing awaits between the look at ``last_tick``,
its update and the push (``MemoryStorage.push`` never yields), so tasks
firing one tick at once push it once.

>>> import asyncio
>>> from workhive.models import NewItem
>>> from workhive.schedules import Schedule
>>> backend = MemoryStorage("memory://")  # doctest: +SKIP
>>> asyncio.run(backend.schedule_add(Schedule("t", "p", None, 60.0, "UTC", "1", 0, 0.0)))  # doctest: +SKIP
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from workhive.models import NewItem
from workhive.schedules import Schedule

__all__ = ["MemorySchedules"]


class MemorySchedules:
    """Mixin for ``MemoryStorage``: schedules by name, in the shared store."""

    _schedules: dict[str, Schedule]

    if TYPE_CHECKING:  # MemoryStorage's own; declared for the type checker only

        async def push(self, pool: str, items: Sequence[NewItem]) -> list[str]: ...

    async def schedule_add(self, schedule: Schedule) -> bool:
        """Store ``schedule`` unless its name is taken (``workhive.schedules.StoresSchedules``)."""
        if schedule.name in self._schedules:
            return False
        self._schedules[schedule.name] = schedule
        return True

    async def schedule_get(self, name: str) -> Schedule | None:
        """The schedule called ``name``, or None."""
        return self._schedules.get(name)

    async def schedule_list(self) -> list[Schedule]:
        """Every schedule, by name."""
        return [self._schedules[name] for name in sorted(self._schedules)]

    async def schedule_remove(self, name: str) -> bool:
        """Delete the schedule; False when there was none."""
        return self._schedules.pop(name, None) is not None

    async def schedule_fire(self, name: str, tick: float, item: NewItem) -> str | None:
        """Record ``tick`` as fired and push ``item``, unless the tick (or a later one) was fired already."""
        schedule = self._schedules.get(name)
        if schedule is None or (schedule.last_tick is not None and schedule.last_tick >= tick):
            return None
        self._schedules[name] = schedule.fired(tick)
        return (await self.push(schedule.pool, [item]))[0]
