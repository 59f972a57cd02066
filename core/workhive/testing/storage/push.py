"""Push: rules P1-P3 of the storage contract.

New items, their ids, and dedup keys.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import pytest

from workhive.hive import Hive
from workhive.ids import is_item_id
from workhive.models import ItemState, Job
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class PushRules(ContractBase):
    """Rules P1-P3: new items, their ids, and dedup keys."""

    @pytest.mark.asyncio
    async def test_push_stores_a_pending_item(self, hive: Hive) -> None:
        """[P1] a pushed item is PENDING with no attempts, available from its creation, and reads back as pushed."""
        pool = hive.pool("jobs")
        before = await hive.now()
        item_id = await pool.push({"url": "https://example.com", "n": [1, 2.5, None, True]})
        item = await pool.get(item_id)
        assert isinstance(item_id, str)
        assert item.id == item_id and item.pool == "jobs"
        assert item.state is ItemState.PENDING
        assert item.data == {"url": "https://example.com", "n": [1, 2.5, None, True]}
        assert item.attempts == 0 and item.max_attempts == hive.max_attempts
        assert item.claimed_by is None and item.lease_expires_at is None
        assert item.created_at >= before and item.available_at == item.created_at
        stats = await pool.stats()
        assert (stats.pending, stats.delayed, stats.claimed, stats.done, stats.poisoned) == (1, 0, 0, 0, 0)
        assert await pool.size() == 1

    @pytest.mark.asyncio
    async def test_item_ids_have_the_documented_shape_and_are_unique_across_pools(self, hive: Hive) -> None:
        """[P2] ids have the ``workhive.ids`` shape and never repeat across pools.

        A string of another shape is no item.
        """
        ids = await hive.pool("a").push_many(["x", "y"]) + await hive.pool("b").push_many(["z"])
        ids.append(await hive.pool("a").push("w", dedup_key="k"))
        for item_id in ids:
            assert is_item_id(item_id), f"item id {item_id!r} is not of the workhive.ids shape ('i' + 16 hex digits)"
        assert len(set(ids)) == len(ids), f"item ids repeat across pools: {ids}"
        assert await hive.pool("a").push("again", dedup_key="k") == ids[-1]
        assert await hive.storage.get("a", ids[0].upper()) is None, "a string of another shape is no item"

    @pytest.mark.asyncio
    async def test_delayed_item_waits_for_its_time(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[P1][T1] a delayed item is available at ``created_at + delay``.

        It counts as delayed until then, and is claimable after.
        """
        pool = hive.pool("jobs")
        item_id = await pool.push("later", delay=lease)
        item = await pool.get(item_id)
        assert item.available_at == pytest.approx(item.created_at + lease)
        assert await pool.claim("w1") is None
        stats = await pool.stats()
        assert (stats.pending, stats.delayed) == (0, 1)
        assert await pool.size() == 1
        await self.elapse(clock, lease * 1.5)
        stats = await pool.stats()
        assert (stats.pending, stats.delayed) == (1, 0)
        assert (await self.must_claim(pool)).id == item_id

    @pytest.mark.asyncio
    async def test_dedup_key_returns_the_live_item(self, hive: Hive) -> None:
        """[P3] a live item (pending or claimed) holds its dedup key: pushing the key again returns it.

        Once the item is done, the key is free.
        """
        pool = hive.pool("jobs")
        first = await pool.push({"doc": 1}, dedup_key="doc-1")
        assert await pool.push({"doc": "again"}, dedup_key="doc-1") == first
        other = await pool.push({"doc": 2}, dedup_key="doc-2")
        assert other != first
        assert (await pool.stats()).pending == 2
        assert (await pool.get(first)).data == {"doc": 1}
        # A claimed item still holds its key.
        item = await self.must_claim(pool)
        assert item.id == first
        assert await pool.push("dup", dedup_key="doc-1") == first
        # Once done, the key is free for a new item.
        await pool.complete(item)
        fresh = await pool.push({"doc": "new"}, dedup_key="doc-1")
        assert fresh not in (first, other)
        assert (await pool.get(fresh)).state is ItemState.PENDING

    @pytest.mark.asyncio
    async def test_dedup_within_one_batch(self, hive: Hive) -> None:
        """[P3] a key repeated within one ``push_many`` makes one item, whose id is returned for both."""
        pool = hive.pool("jobs")
        ids = await pool.push_many([Job("a", dedup_key="k"), Job("b"), Job("c", dedup_key="k"), "d"])
        assert len(ids) == 4
        assert ids[0] == ids[2]
        assert len(set(ids)) == 3
        assert (await pool.stats()).pending == 3
        assert (await pool.get(ids[0])).data == "a"

    @pytest.mark.asyncio
    async def test_dedup_key_of_a_poisoned_item_is_free(self, hive: Hive) -> None:
        """[P3] a poisoned item frees its dedup key."""
        pool = hive.pool("jobs")
        first = await pool.push("x", dedup_key="k")
        await pool.fail(await self.must_claim(pool), "boom", poison=True)
        assert await pool.push("y", dedup_key="k") != first
