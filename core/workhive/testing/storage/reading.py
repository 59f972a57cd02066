"""Reading: rules G1, L1-L3, T1-T3 of the storage contract.

Get, the listings, and stats.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import pytest

from workhive.errors import InvalidArgument, ItemNotFound
from workhive.hive import Hive
from workhive.models import ItemState, Job
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class ReadingRules(ContractBase):
    """Rules G1, L1-L3, T1-T3: get, the listings, and stats."""

    @pytest.mark.asyncio
    async def test_get_is_scoped_to_its_pool(self, hive: Hive) -> None:
        """[G1] an id read through another pool is no item there."""
        item_id = await hive.pool("a").push("x")
        await hive.pool("b").push("y")
        assert await hive.storage.get("b", item_id) is None
        assert await hive.storage.get("never-used", item_id) is None
        with pytest.raises(ItemNotFound):
            await hive.pool("b").get(item_id)
        assert (await hive.storage.get("a", item_id)) is not None

    @pytest.mark.asyncio
    async def test_items_lists_by_state_oldest_first(self, hive: Hive) -> None:
        """[L1] items of one state in push order; an unknown state is refused."""
        pool = hive.pool("jobs")
        ids = await pool.push_many(["a", "b", "c"])
        claimed = await self.must_claim(pool)
        assert [i.id for i in await pool.items("pending")] == ids[1:]
        assert [i.id for i in await pool.items(ItemState.CLAIMED)] == [claimed.id]
        assert await pool.items("done") == []
        with pytest.raises(InvalidArgument, match="unknown item state"):
            await pool.items("finished")

    @pytest.mark.asyncio
    async def test_listing_orders(self, hive: Hive, clock: ManualClock | None) -> None:
        """[L1][L2][L3] items in push order, whatever order they changed state in; workers; pools."""
        pool = hive.pool("jobs")
        # Due in the reverse of push order, so no other order passes for push order.
        ids = await pool.push_many(
            [Job("a", delay=0.3), Job("b", delay=0.2), Job("c", delay=0.1), Job("d", priority=5)]
        )
        await self.elapse(clock, 0.5)
        claimed = {i.id: i for i in await pool.claim_many(4, "w1")}
        assert list(claimed) == [ids[3], ids[2], ids[1], ids[0]]
        for item_id in (ids[3], ids[2], ids[0], ids[1]):
            await pool.fail(claimed[item_id], "x", poison=True)
        assert [i.id for i in await pool.dead()] == ids
        assert [i.id for i in await pool.dead(limit=2, offset=2)] == ids[2:]
        await hive.pool("b-pool").push(1)
        await hive.pool("a-pool").push(1)
        assert await hive.pools() == ["a-pool", "b-pool", "jobs"]
        for name in ("w2", "w1", "w3"):
            await hive.workers.register(worker_id=name)
            await self.elapse(clock, 0.01)
        await hive.workers.register(worker_id="w2")  # re-registering moves it to the end
        assert [w.worker_id for w in await hive.workers.list()] == ["w1", "w3", "w2"]

    @pytest.mark.asyncio
    async def test_stats_size_and_pools(self, hive: Hive, clock: ManualClock | None) -> None:
        """[L3][T1] exact counts per state, ``total``, ``size``, and the sorted pools that hold items."""
        assert await hive.pools() == []
        pool = hive.pool("jobs")
        empty = await hive.pool("empty").stats()
        assert (empty.pool, empty.total, empty.oldest_pending_at) == ("empty", 0, None)
        first = await pool.get(await pool.push("a"))
        await self.elapse(clock, 0.05)
        await pool.push_many(["b", "c", Job("later", delay=3600)])
        await hive.pool("other").push("x")
        await self.must_claim(pool)
        stats = await pool.stats()
        assert (stats.pending, stats.delayed, stats.claimed, stats.done, stats.poisoned) == (2, 1, 1, 0, 0)
        assert stats.total == 4
        assert await pool.size() == 3
        assert stats.oldest_pending_at is not None and stats.oldest_pending_at > first.created_at
        assert await hive.pools() == ["jobs", "other"]

    @pytest.mark.asyncio
    async def test_oldest_pending_at_is_the_longest_waiting_item(self, hive: Hive, clock: ManualClock | None) -> None:
        """[T3] ``oldest_pending_at`` is the ``available_at`` of the item that has waited longest."""
        pool = hive.pool("jobs")
        first = await pool.get(await pool.push("a"))
        await self.elapse(clock, 0.05)
        await pool.push("b")
        assert (await pool.stats()).oldest_pending_at == first.available_at

    @pytest.mark.asyncio
    async def test_stats_counts_an_expired_claim_as_what_it_has_become(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[T2] an expired lease is never counted as claimed: pending (ready since its expiry) or poisoned if spent."""
        pool = hive.pool("jobs")
        await pool.push_many(["retry", Job("spent", max_attempts=1), "held"])
        retry = await self.must_claim(pool, "w1", lease=lease)
        await self.must_claim(pool, "w1", lease=lease)
        await self.must_claim(pool, "w1", lease=lease * 100)
        await self.elapse(clock, lease * 1.5)
        stats = await pool.stats()
        assert (stats.pending, stats.delayed, stats.claimed, stats.done, stats.poisoned) == (1, 0, 1, 0, 1)
        assert stats.oldest_pending_at == retry.lease_expires_at
        assert await pool.size() == 1

    @pytest.mark.asyncio
    async def test_oldest_pending_at_is_when_a_ready_item_became_available(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[T3] min ``available_at`` over ready items: not created_at, and delayed items do not count."""
        pool = hive.pool("jobs")
        delayed_then_ready = await pool.get(await pool.push("a", delay=lease))
        await self.elapse(clock, lease * 1.5)
        await pool.push("b")
        await pool.push("not yet", delay=lease * 100)
        assert (await pool.stats()).oldest_pending_at == delayed_then_ready.available_at
        await self.must_claim(pool)
        await self.must_claim(pool)
        stats = await pool.stats()
        assert (stats.pending, stats.delayed, stats.oldest_pending_at) == (0, 1, None)
        # Pushed first but due later: the item pushed after it has waited longer.
        other = hive.pool("other")
        await other.push("due later", delay=lease)
        waiting = await other.get(await other.push("ready at once"))
        await self.elapse(clock, lease * 1.5)
        assert (await other.stats()).oldest_pending_at == waiting.available_at
