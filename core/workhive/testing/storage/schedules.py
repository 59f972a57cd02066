"""Schedules: rules SC1-SC5 of the storage contract.

Stored schedules (``workhive.schedules.StoresSchedules``) and the atomic
"record the tick, push its item" that makes each tick fire exactly once
however many supervisors fire it.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import asyncio

import pytest

from workhive.errors import InvalidArgument, InvalidItem, InvalidName, ScheduleExists, ScheduleNotFound
from workhive.hive import Hive
from workhive.models import ItemState, NewItem
from workhive.schedules import Schedule, StoresSchedules
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


def _schedules(hive: Hive) -> StoresSchedules:
    storage = hive.storage
    assert isinstance(storage, StoresSchedules), f"{type(storage).__name__} does not implement StoresSchedules"
    return storage


def _schedule(
    name: str = "tick", pool: str = "jobs", *, created_at: float = 1000.0, cron: str | None = None
) -> Schedule:
    every = None if cron is not None else 60.0
    return Schedule(name, pool, cron, every, "Europe/Berlin", '{"n": 1}', 3, created_at, None)


class ScheduleRules(ContractBase):
    """Rules SC1-SC5: schedules stored in the hive, each tick pushed once."""

    @pytest.mark.asyncio
    async def test_schedules_are_stored_listed_by_name_and_removed(self, hive: Hive) -> None:
        """[SC1][SC2] add, get and list return the record as stored (list by name); remove deletes it once."""
        storage = _schedules(hive)
        b = _schedule("b-every")
        a = _schedule("a-cron", "other", cron="*/5 * * * *")
        assert await storage.schedule_add(b) is True
        assert await storage.schedule_add(a) is True
        assert await storage.schedule_get("a-cron") == a
        assert await storage.schedule_get("missing") is None
        assert await storage.schedule_list() == [a, b]
        assert await storage.schedule_remove("a-cron") is True
        assert await storage.schedule_remove("a-cron") is False
        assert await storage.schedule_list() == [b]

    @pytest.mark.asyncio
    async def test_a_taken_schedule_name_changes_nothing(self, hive: Hive) -> None:
        """[SC1] adding a schedule under a taken name returns False and keeps the stored one as it was."""
        storage = _schedules(hive)
        first = _schedule("dup")
        assert await storage.schedule_add(first) is True
        assert await storage.schedule_fire("dup", 1060.0, NewItem('"x"')) is not None
        kept = await storage.schedule_get("dup")
        assert kept is not None and kept.last_tick == 1060.0
        assert await storage.schedule_add(_schedule("dup", "elsewhere", cron="0 * * * *")) is False
        assert await storage.schedule_get("dup") == kept

    @pytest.mark.asyncio
    async def test_fire_records_the_tick_and_pushes_the_item_once(self, hive: Hive) -> None:
        """[SC3] fire pushes one PENDING item to the schedule's pool and records the tick; the same or an
        earlier tick pushes nothing, also once the item is done (the record outlives the item)."""
        storage = _schedules(hive)
        await storage.schedule_add(_schedule("s", "sched-pool"))
        item_id = await storage.schedule_fire("s", 1060.0, NewItem('{"n": 1}', max_attempts=4))
        assert item_id is not None
        item = await self.raw(hive, "sched-pool", item_id)
        assert item.state is ItemState.PENDING and item.data == {"n": 1} and item.max_attempts == 4
        stored = await storage.schedule_get("s")
        assert stored is not None and stored.last_tick == 1060.0
        assert await storage.schedule_fire("s", 1060.0, NewItem('{"n": 1}')) is None
        assert await storage.schedule_fire("s", 1000.0, NewItem('{"n": 1}')) is None
        claimed = await self.must_claim(hive.pool("sched-pool"))
        await hive.pool("sched-pool").complete(claimed)
        assert await storage.schedule_fire("s", 1060.0, NewItem('{"n": 1}')) is None
        assert (await hive.pool("sched-pool").stats()).total == 1
        later = await storage.schedule_fire("s", 1120.0, NewItem('{"n": 1}'))
        assert later is not None and later != item_id
        assert (await hive.pool("sched-pool").stats()).pending == 1

    @pytest.mark.asyncio
    async def test_fire_of_a_missing_or_removed_schedule_pushes_nothing(self, hive: Hive) -> None:
        """[SC2][SC3] firing a schedule that does not exist (or was removed) returns None and stores nothing."""
        storage = _schedules(hive)
        assert await storage.schedule_fire("ghost", 1060.0, NewItem("1")) is None
        await storage.schedule_add(_schedule("gone", "gone-pool"))
        await storage.schedule_remove("gone")
        assert await storage.schedule_fire("gone", 1060.0, NewItem("1")) is None
        assert await hive.pools() == []

    @pytest.mark.asyncio
    async def test_concurrent_fires_of_one_tick_push_one_item(self, hive: Hive) -> None:
        """[SC4] many tasks firing the same ticks at once: each tick pushes exactly one item."""
        storage = _schedules(hive)
        await storage.schedule_add(_schedule("race", "race-pool"))
        ticks = [1060.0, 1120.0, 1180.0]
        results = await asyncio.gather(
            *(storage.schedule_fire("race", tick, NewItem(f'"{tick}"')) for tick in ticks for _ in range(5))
        )
        pushed = [r for r in results if r is not None]
        assert len(pushed) == len(set(pushed))
        items = await hive.pool("race-pool").items(ItemState.PENDING, limit=100)
        assert len(items) == len(pushed) and len(pushed) <= len(ticks)
        stored = await storage.schedule_get("race")
        assert stored is not None and stored.last_tick == 1180.0
        # Any tick whose item was not pushed was overtaken by a later one (never pushed twice).
        assert [item.data for item in items] == sorted(item.data for item in items)

    @pytest.mark.asyncio
    async def test_fire_due_follows_the_clock_and_the_misfire_policy(
        self, hive: Hive, clock: ManualClock | None
    ) -> None:
        """[SC3] ``fire_due`` pushes nothing before the first tick, one item per tick, and after downtime
        the latest tick only (skip) or the latest N (catch-up N)."""
        manual = self.needs_manual_clock(clock)
        schedules = hive.schedules()
        await schedules.add("skip", "p-skip", every="60s", data={"k": "skip"})
        await schedules.add("catch", "p-catch", every="60s", data={"k": "catch"}, catch_up=3)
        assert await schedules.fire_due() == []
        manual.advance(60.0)
        fired = await schedules.fire_due()
        assert sorted(f.schedule for f in fired) == ["catch", "skip"]
        assert await schedules.fire_due() == []
        manual.advance(600.0)  # ten ticks missed
        fired = await schedules.fire_due()
        assert [f.schedule for f in fired].count("skip") == 1
        assert [f.schedule for f in fired].count("catch") == 3
        assert (await hive.pool("p-skip").stats()).pending == 2
        assert (await hive.pool("p-catch").stats()).pending == 4
        items = await hive.pool("p-catch").items(ItemState.PENDING, limit=10)
        assert all(item.data == {"k": "catch"} for item in items)

    @pytest.mark.asyncio
    async def test_bad_schedules_are_refused_and_nothing_is_stored(self, hive: Hive) -> None:
        """[SC5] a cron that does not parse, an unknown time zone, every 0, a bad pool or schedule name,
        data that is not JSON and a taken name raise before anything is stored; removing a missing one too."""
        schedules = hive.schedules()
        await schedules.add("kept", "jobs", cron="*/5 * * * *")
        before = await schedules.list()
        with pytest.raises(InvalidArgument, match="does not parse"):
            await schedules.add("bad-cron", "jobs", cron="61 * * * *")
        with pytest.raises(InvalidArgument, match="unknown time zone"):
            await schedules.add("bad-tz", "jobs", cron="* * * * *", tz="Mars/Olympus")
        with pytest.raises(InvalidArgument, match="too short"):
            await schedules.add("zero", "jobs", every="0")
        with pytest.raises(InvalidArgument, match="exactly one"):
            await schedules.add("both", "jobs", every="1m", cron="* * * * *")
        with pytest.raises(InvalidName):
            await schedules.add("bad-pool", "no spaces allowed")
        with pytest.raises(InvalidName):
            await schedules.add("bad name", "jobs", every="1m")
        with pytest.raises(InvalidItem):
            await schedules.add("bad-data", "jobs", every="1m", data={"x": float("nan")})
        with pytest.raises(ScheduleExists):
            await schedules.add("kept", "jobs", every="1m")
        with pytest.raises(ScheduleNotFound):
            await schedules.remove("missing")
        assert await schedules.list() == before
        assert await hive.pools() == []
