"""The ``StoresSchedules`` capability on Redis.

A schedule's definition lives in the hive-wide hash ``{prefix}:schedules``
(name -> JSON); the latest tick it fired lives in its pool's hash
``{prefix/pool}:ticks``, under a field naming the schedule and its creation
time. Firing is one script on the pool's slot (``lua/schedule_fire-5.lua``):
compare and move that tick, push the item. So every script still touches
one slot (``keys.py``), a tick is pushed once however many supervisors fire
it, and a schedule removed and added again under the same name starts from
a fresh record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from workhive.errors import StorageCorrupt
from workhive.models import NewItem
from workhive.schedules import Schedule
from workhive_redis.connections import RedisClient
from workhive_redis.keys import HiveKeys, PoolKeys

__all__ = ["RedisSchedules"]


def _num(value: float) -> str:
    return repr(float(value))  # reads back as exactly the same float (Lua's tonumber)


def tick_field(name: str, created_at: float) -> str:
    """The schedule's field in its pool's ticks hash: a new schedule under an old name gets a new one."""
    return f"{name}@{_num(created_at)}"


def _definition(schedule: Schedule) -> str:
    s = schedule
    return json.dumps([s.pool, s.cron, s.every, s.tz, s.payload, s.catch_up, s.created_at])


class RedisSchedules:
    """Schedules of one hive, over ``client`` (``RedisStorage`` holds one)."""

    def __init__(self, client: RedisClient, keys: HiveKeys, pool_keys: Callable[[str], PoolKeys], where: str) -> None:
        self._client = client
        self._keys = keys
        self._pool_keys = pool_keys
        self._where = where

    def _parse(self, name: str, text: str, last: Any) -> Schedule:
        try:
            pool, cron, every, tz, payload, catch_up, created_at = json.loads(text)
            return Schedule(
                name, pool, cron, None if every is None else float(every), tz, payload, int(catch_up),
                float(created_at), None if last is None else float(last),
            )  # fmt: skip
        except (ValueError, TypeError) as exc:
            raise StorageCorrupt(f"schedule {name!r} at {self._where} is not readable: {exc}", name=name) from None

    async def _with_ticks(self, found: Sequence[tuple[str, str]]) -> list[Schedule]:
        """The schedules ``(name, definition)`` with their latest ticks, read in one round trip."""
        drafts = [self._parse(name, text, None) for name, text in found]
        if not drafts:
            return []
        lasts = await self._client.pipeline(
            [("HGET", self._pool_keys(d.pool).ticks, tick_field(d.name, d.created_at)) for d in drafts],
            write=False,
        )
        return [self._parse(name, text, last) for (name, text), last in zip(found, lasts)]

    async def add(self, schedule: Schedule) -> bool:
        return bool(
            await self._client.command("HSETNX", self._keys.schedules, schedule.name, _definition(schedule), write=True)
        )

    async def get(self, name: str) -> Schedule | None:
        text = await self._client.command("HGET", self._keys.schedules, name)
        return None if text is None else (await self._with_ticks([(name, text)]))[0]

    async def list(self) -> list[Schedule]:
        flat = await self._client.command("HGETALL", self._keys.schedules)
        if isinstance(flat, dict):
            pairs = list(flat.items())
        else:
            pairs = list(zip(flat[::2], flat[1::2]))
        return await self._with_ticks(sorted(pairs))

    async def remove(self, name: str) -> bool:
        found = await self.get(name)
        if found is None:
            return False
        removed = bool(await self._client.command("HDEL", self._keys.schedules, name, write=True))
        # Its tick record goes too (another slot: a second command). Were this one lost, the
        # record would only be a stale field: a new schedule by this name gets its own.
        await self._client.command(
            "HDEL", self._pool_keys(found.pool).ticks, tick_field(name, found.created_at), write=True
        )
        return removed

    async def fire(
        self, name: str, tick: float, item: NewItem, clock: str, pool_number: Callable[[str], Any]
    ) -> str | None:
        schedule = await self.get(name)
        if schedule is None:
            return None
        k = self._pool_keys(schedule.pool)
        number = await pool_number(schedule.pool)
        reply = await self._client.run(
            "schedule_fire",
            (k.ready, k.delayed, k.seq, k.n, k.ticks),
            (
                clock, number, k.wake, tick_field(name, schedule.created_at), _num(tick), item.payload,
                item.priority, _num(item.delay), item.max_attempts,
            ),
        )  # fmt: skip
        return None if reply is None else str(reply)
