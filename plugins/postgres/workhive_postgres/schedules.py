"""The ``StoresSchedules`` capability on PostgreSQL: the ``schedules`` table (schema version 4; claim marks are 5).

Firing is one statement (``schedule_fire`` in ``sql/queries.sql``): the
``UPDATE`` that moves the schedule's ``last_tick`` forward, the ``INSERT`` of
the tick's item and the wake-up, together. The row lock the ``UPDATE`` takes
makes a concurrent fire of the same tick wait, then find the tick recorded
and push nothing, so a tick is pushed once however many supervisors fire it.
Each function runs on a pooled connection (``PostgresStorage._run``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workhive.models import NewItem
from workhive.schedules import Schedule

__all__ = ["add", "fire", "get", "list_all", "remove"]


def _schedule(row: Sequence[Any]) -> Schedule:
    return Schedule(*row)


async def add(conn: Any, q: Mapping[str, str], schedule: Schedule) -> bool:
    """Insert ``schedule`` unless its name is taken."""
    s = schedule
    status = await conn.execute(
        q["schedule_add"], s.name, s.pool, s.cron, s.every, s.tz, s.payload, s.catch_up, s.created_at
    )
    return str(status).split()[-1] == "1"


async def get(conn: Any, q: Mapping[str, str], name: str) -> Schedule | None:
    """The schedule called ``name``, or None."""
    row = await conn.fetchrow(q["schedule_get"], name)
    return None if row is None else _schedule(row)


async def list_all(conn: Any, q: Mapping[str, str]) -> list[Schedule]:
    """Every schedule, by name."""
    return [_schedule(row) for row in await conn.fetch(q["schedule_list"])]


async def remove(conn: Any, q: Mapping[str, str], name: str) -> bool:
    """Delete the schedule; False when there was none."""
    return str(await conn.execute(q["schedule_remove"], name)).split()[-1] == "1"


async def fire(
    conn: Any, q: Mapping[str, str], offset: float, channel: str, name: str, tick: float, item: NewItem
) -> str | None:
    """Record ``tick`` and push ``item`` (one statement); the item's id, or None when the tick was fired."""
    row = await conn.fetchrow(
        q["schedule_fire"], offset, name, tick, item.payload, item.priority, item.max_attempts, float(item.delay),
        channel,
    )  # fmt: skip
    return None if row is None else f"i{row[0]:016x}"  # the workhive.ids shape, as backend._id writes it
