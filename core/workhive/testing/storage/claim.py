"""Claim: rules C1-C4 of the storage contract.

Which items a claim takes, in what order, and what it makes of them.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import asyncio

import pytest

from workhive.hive import Hive
from workhive.models import ItemState, Job
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class ClaimRules(ContractBase):
    """Rules C1-C4: which items a claim takes, in what order, and what it makes of them."""

    @pytest.mark.asyncio
    async def test_claim_takes_a_lease_and_a_token(self, hive: Hive, clock: ManualClock | None) -> None:
        """[C2] a claim makes the item CLAIMED by the worker under a higher token.

        Attempts + 1, a lease of ``lease`` seconds from now, and what it returns is what is stored.
        """
        pool = hive.pool("jobs")
        pushed = await pool.get(await pool.push("a"))
        now = await hive.now()
        item = await self.must_claim(pool, "w1", lease=30.0)
        assert item.id == pushed.id and item.data == "a"
        assert item.state is ItemState.CLAIMED and item.claimed_by == "w1"
        assert item.attempts == 1 and item.token > pushed.token
        assert item.lease_seconds == 30.0
        assert item.lease_expires_at is not None
        if clock is not None:
            assert self.same_time(item.lease_expires_at, now + 30.0)
        else:
            assert now + 29.0 < item.lease_expires_at < now + 31.0
        assert await self.raw(hive, "jobs", item.id) == item
        stats = await pool.stats()
        assert (stats.pending, stats.claimed) == (0, 1)

    @pytest.mark.asyncio
    async def test_claim_from_an_empty_or_unknown_pool_returns_none(self, hive: Hive) -> None:
        """[C1] with nothing claimable (no item, or every item held) claim returns None and claim_many an empty list."""
        assert await hive.pool("never-pushed").claim("w1") is None
        assert await hive.pool("never-pushed").claim_many(5, "w1") == []
        pool = hive.pool("jobs")
        await pool.push(1)
        await self.must_claim(pool)
        assert await pool.claim("w2") is None

    @pytest.mark.asyncio
    async def test_claim_order_is_priority_then_fifo(self, hive: Hive) -> None:
        """[C1] higher priority first, then push order."""
        pool = hive.pool("jobs")
        low1 = await pool.push("low1")
        high1 = await pool.push("high1", priority=9)
        low2 = await pool.push("low2")
        mid = await pool.push("mid", priority=3)
        high2 = await pool.push("high2", priority=9)
        order = [(await self.must_claim(pool)).id for _ in range(5)]
        assert order == [high1, high2, mid, low1, low2]

    @pytest.mark.asyncio
    async def test_available_at_orders_items_of_equal_priority(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[C1] among items of one priority, the one available soonest goes first, whatever the push order."""
        pool = hive.pool("jobs")
        later = await pool.push("later", delay=lease)
        sooner = await pool.push("sooner", delay=lease / 2)
        ready_last = await pool.push("ready-but-inserted-last", delay=lease * 0.75)
        await self.elapse(clock, lease * 1.5)
        assert [(await self.must_claim(pool)).id for _ in range(3)] == [sooner, ready_last, later]

    @pytest.mark.asyncio
    async def test_priority_beats_an_earlier_available_at(self, hive: Hive, clock: ManualClock | None) -> None:
        """[C1] priority comes before the time an item became available."""
        pool = hive.pool("jobs")
        old = await pool.push("old")
        await self.elapse(clock, 0.05)
        urgent = await pool.push("urgent", priority=1)
        assert (await self.must_claim(pool)).id == urgent
        assert (await self.must_claim(pool)).id == old

    @pytest.mark.asyncio
    async def test_push_many_and_claim_many(self, hive: Hive) -> None:
        """[C1] ``claim_many`` takes up to ``n`` items in claim order; ``push_many`` returns the ids in order."""
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"i": i} for i in range(7)] + [Job({"i": "top"}, priority=2)])
        assert len(ids) == 8 and len(set(ids)) == 8
        assert await pool.push_many([]) == []
        batch = await pool.claim_many(5, "w1", lease=30.0)
        assert [i.id for i in batch] == [ids[7], *ids[:4]]
        assert all(i.state is ItemState.CLAIMED and i.claimed_by == "w1" and i.attempts == 1 for i in batch)
        rest = await pool.claim_many(10, "w2")
        assert [i.id for i in rest] == ids[4:7]
        assert await pool.claim_many(3, "w3") == []

    @pytest.mark.asyncio
    async def test_claim_is_atomic_under_concurrent_tasks(self, hive: Hive) -> None:
        """[C3] forty tasks claiming at once take every item exactly once."""
        pool = hive.pool("jobs")
        total = 300
        await pool.push_many(range(total))
        seen: list[str] = []

        async def worker(n: int) -> None:
            while True:
                batch = await pool.claim_many(1 + n % 4, f"w{n}", lease=60.0)
                if not batch:
                    return
                seen.extend(i.id for i in batch)
                await asyncio.sleep(0)

        await asyncio.gather(*(worker(n) for n in range(40)))
        assert len(seen) == total
        assert len(set(seen)) == total
        stats = await pool.stats()
        assert (stats.pending, stats.claimed) == (0, total)

    @pytest.mark.asyncio
    async def test_claimed_items_equal_a_later_get_field_for_field(self, hive: Hive) -> None:
        """[C4] what claim returns is what was stored."""
        pool = hive.pool("jobs")
        await pool.push_many([Job("a", dedup_key="ka"), Job("b", priority=2), Job("c", max_attempts=2)])
        for item in await pool.claim_many(3, "w1", lease=25.0):
            assert await self.raw(hive, "jobs", item.id) == item
