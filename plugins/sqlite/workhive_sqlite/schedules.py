"""The ``StoresSchedules`` capability on SQLite: the ``schedules`` table (schema version 5).

Firing is one ``BEGIN IMMEDIATE`` transaction: move the schedule's
``last_tick`` forward (only if the tick is later than any fired) and push the
tick's item. The write lock serialises every process on the file, so a tick is
pushed once however many supervisors fire it, and a crash between the two
steps leaves neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workhive.models import NewItem
from workhive.schedules import Schedule
from workhive_sqlite.sqlfiles import queries

if TYPE_CHECKING:
    from workhive_sqlite.ops import Operations

__all__ = ["schedule_add", "schedule_fire", "schedule_get", "schedule_list", "schedule_remove"]

_Q = queries()


def _schedule(row: Any) -> Schedule:
    name, pool, cron, every, tz, payload, catch_up, created_at, last_tick = row
    return Schedule(
        name, pool, cron, None if every is None else float(every), tz, payload, int(catch_up), float(created_at),
        None if last_tick is None else float(last_tick),
    )  # fmt: skip


def schedule_add(ops: Operations, schedule: Schedule) -> bool:
    """Run on a connection's thread (``SqliteStorage._run``): insert unless the name is taken."""
    s = schedule
    args = (s.name, s.pool, s.cron, s.every, s.tz, s.payload, s.catch_up, s.created_at)
    return ops.write(lambda: ops.conn.execute(_Q["schedule_add"], args).rowcount == 1)


def schedule_get(ops: Operations, name: str) -> Schedule | None:
    """The schedule called ``name``, or None."""
    row = ops.conn.execute(_Q["schedule_get"], (name,)).fetchone()
    return None if row is None else _schedule(row)


def schedule_list(ops: Operations) -> list[Schedule]:
    """Every schedule, by name."""
    return [_schedule(row) for row in ops.conn.execute(_Q["schedule_list"]).fetchall()]


def schedule_remove(ops: Operations, name: str) -> bool:
    """Delete the schedule; False when there was none."""
    return ops.write(lambda: ops.conn.execute(_Q["schedule_remove"], (name,)).rowcount == 1)


def schedule_fire(ops: Operations, name: str, tick: float, item: NewItem) -> tuple[str, str] | None:
    """Record ``tick`` and push ``item`` in one transaction; ``(pool, item id)``, or None when not due."""
    return ops.write(_fire, ops, name, tick, item)


def _fire(ops: Operations, name: str, tick: float, item: NewItem) -> tuple[str, str] | None:
    row = ops.conn.execute(_Q["schedule_advance"], (tick, name, tick)).fetchone()
    if row is None:
        return None
    pool = str(row[0])
    return pool, ops.push(pool, [item])[0]  # inside this transaction (Operations._transaction nests)
