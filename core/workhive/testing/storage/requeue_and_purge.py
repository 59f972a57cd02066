"""Finished items: rules Q1-Q2, U1 of the storage contract.

Requeueing poisoned items and purging old finished ones.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import pytest

from workhive.errors import ItemNotFound
from workhive.hive import Hive
from workhive.models import ItemState
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class RequeueAndPurgeRules(ContractBase):
    """Rules Q1-Q2, U1: requeueing poisoned items and purging old finished ones."""

    @pytest.mark.asyncio
    async def test_dead_listing_and_requeue(self, hive: Hive) -> None:
        """[L1][Q1] poisoned items list in push order, and requeue brings them back.

        Given ids (or all) go back to PENDING with attempts reset and the error kept; an unknown id moves nothing.
        """
        pool = hive.pool("jobs")
        ids = await pool.push_many(["a", "b", "c", "d"])
        for _ in ids:
            await pool.fail(await self.must_claim(pool), "dead", poison=True)
        dead = await pool.dead()
        assert [i.id for i in dead] == ids
        assert all(i.state is ItemState.POISONED and i.error == "dead" for i in dead)
        assert [i.id for i in await pool.dead(limit=2, offset=1)] == ids[1:3]
        with pytest.raises(ItemNotFound, match="no-such-id"):
            await pool.requeue([ids[1], "no-such-id"])
        assert (await pool.get(ids[1])).state is ItemState.POISONED  # an unknown id and nothing moves
        assert await pool.requeue([ids[1], ids[1]]) == 1
        back = await pool.get(ids[1])
        assert back.state is ItemState.PENDING and back.attempts == 0 and back.error == "dead"
        assert back.finished_at is None
        assert (await self.must_claim(pool)).id == ids[1]
        assert await pool.requeue() == 3
        assert await pool.requeue() == 0
        assert await pool.dead() == []
        stats = await pool.stats()
        assert (stats.pending, stats.claimed, stats.poisoned) == (3, 1, 0)

    @pytest.mark.asyncio
    async def test_requeue_restores_the_dedup_key(self, hive: Hive) -> None:
        """[Q2] a requeued item is live again, so it holds its dedup key again."""
        pool = hive.pool("jobs")
        item_id = await pool.push("x", dedup_key="k")
        await pool.fail(await self.must_claim(pool), "boom", poison=True)
        assert await pool.requeue([item_id]) == 1
        assert await pool.push("y", dedup_key="k") == item_id
        assert (await pool.stats()).pending == 1

    @pytest.mark.asyncio
    async def test_purge_deletes_old_finished_items(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[U1] purge deletes DONE and POISONED items finished longer ago than ``older_than``, never live ones."""
        pool = hive.pool("jobs")
        done_id, dead_id, claimed_id, pending_id = await pool.push_many(["done", "dead", "claimed", "pending"])
        await pool.complete(await self.must_claim(pool))
        await pool.fail(await self.must_claim(pool), "x", poison=True)
        await self.must_claim(pool, lease=lease * 100)
        assert await pool.purge(older_than=lease * 10) == 0
        await self.elapse(clock, lease * 1.5)
        assert await pool.purge(older_than=lease) == 2
        with pytest.raises(ItemNotFound):
            await pool.get(done_id)
        with pytest.raises(ItemNotFound):
            await pool.get(dead_id)
        assert (await pool.get(claimed_id)).state is ItemState.CLAIMED
        assert (await pool.get(pending_id)).state is ItemState.PENDING
        stats = await pool.stats()
        assert (stats.done, stats.poisoned) == (0, 0)

    @pytest.mark.asyncio
    async def test_purge_ages_items_by_when_they_finished(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[U1] an old item that finished just now is young: purge goes by finished_at, never created_at."""
        pool = hive.pool("jobs")
        item_id = await pool.push("old")
        await self.elapse(clock, lease * 3)
        await pool.complete(await self.must_claim(pool))
        assert await pool.purge(older_than=lease) == 0
        assert (await pool.get(item_id)).state is ItemState.DONE
        await self.elapse(clock, lease * 1.5)
        assert await pool.purge(older_than=lease) == 1
        assert await hive.pools() == []

    @pytest.mark.asyncio
    async def test_purge_takes_only_items_finished_more_than_older_than_ago(
        self, hive: Hive, clock: ManualClock | None
    ) -> None:
        """[U1] at exactly ``older_than`` seconds after finishing an item stays; a moment later it goes."""
        manual = self.needs_manual_clock(clock)
        pool = hive.pool("jobs")
        await pool.push("x")
        await pool.complete(await self.must_claim(pool))
        manual.advance(30.0)
        assert await pool.purge(older_than=30.0) == 0
        manual.advance(0.5)
        assert await pool.purge(older_than=30.0) == 1
