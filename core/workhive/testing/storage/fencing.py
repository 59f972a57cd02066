"""Fencing: rules A1 of the storage contract.

A settling call acts only through the live claim: right pool, right token, unexpired lease.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import attrs
import pytest

from workhive.errors import LeaseLost
from workhive.hive import Hive
from workhive.models import Ack
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class FencingRules(ContractBase):
    """Rules A1: a settling call acts only through the live claim: right pool, right token, unexpired lease."""

    @pytest.mark.asyncio
    async def test_stale_token_is_rejected_and_changes_nothing(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[A1] a superseded claim can neither complete, fail, extend nor release, and changes nothing.

        ``LeaseLost`` names the refused claim (``item_id``, ``token``).
        """
        pool = hive.pool("jobs")
        stale, current = await self.superseded_claim(pool, clock, lease)
        before = await self.raw(hive, "jobs", current.id)
        for action in (
            pool.complete(stale, "late"),
            pool.fail(stale, "late", retry_in=0),
            pool.extend(stale, 100.0),
            pool.release(stale),
        ):
            with pytest.raises(LeaseLost) as info:
                await action
            # LeaseLost carries the claim it refused, so a caller can log or drop it.
            assert getattr(info.value, "item_id", None) == stale.id
            assert getattr(info.value, "token", None) == stale.token
        assert await self.raw(hive, "jobs", current.id) == before
        stats = await pool.stats()
        assert (stats.claimed, stats.done, stats.pending) == (1, 0, 0)
        await pool.complete(current, "on time")
        assert (await pool.get(current.id)).result == "on time"

    @pytest.mark.asyncio
    async def test_a_forged_token_is_rejected(self, hive: Hive) -> None:
        """[A1] a token the item does not hold cannot complete or fail it."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        forged = attrs.evolve(item, token=item.token + 1000)
        before = await self.raw(hive, "jobs", item.id)
        with pytest.raises(LeaseLost):
            await pool.complete(forged)
        with pytest.raises(LeaseLost):
            await pool.fail(forged, "x", retry_in=0)
        assert await self.raw(hive, "jobs", item.id) == before

    @pytest.mark.asyncio
    async def test_an_expired_lease_cannot_complete(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[A1] once its lease has expired a claim cannot complete or extend, even if nobody claimed the item since."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool, lease=lease)
        await self.elapse(clock, lease * 1.5)
        with pytest.raises(LeaseLost):
            await pool.complete(item)
        with pytest.raises(LeaseLost):
            await pool.extend(item, lease)
        assert (await pool.stats()).done == 0

    @pytest.mark.asyncio
    async def test_acting_through_another_pool_changes_nothing(self, hive: Hive) -> None:
        """[A1] complete/fail/extend/release name the pool too: the right claim in the wrong pool is refused."""
        await hive.pool("a").push("mine")
        item = await self.must_claim(hive.pool("a"))
        await hive.pool("b").push("other")
        assert await hive.storage.complete("b", [Ack(item.id, item.token, None)]) == [False]
        assert await hive.storage.fail("b", item.id, item.token, "x", 0.0, False) is None
        assert await hive.storage.release("b", item.id, item.token, 0.0) is False
        assert await hive.storage.extend("b", item.id, item.token, 99.0) is None
        assert await self.raw(hive, "a", item.id) == item

    @pytest.mark.asyncio
    async def test_an_expired_claim_cannot_fail_or_release(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[A1] the lease check guards every settling call, not only complete."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool, lease=lease)
        await self.elapse(clock, lease * 1.5)
        with pytest.raises(LeaseLost):
            await pool.fail(item, "late", retry_in=0)
        with pytest.raises(LeaseLost):
            await pool.release(item)
        again = await self.must_claim(pool, "w2")
        assert again.id == item.id and again.attempts == 2 and again.releases == 0 and again.error is None

    @pytest.mark.asyncio
    async def test_a_lease_ends_exactly_at_its_expiry(self, hive: Hive, clock: ManualClock | None) -> None:
        """[A1][C1] at ``now == lease_expires_at`` the claim is refused everywhere and the item is claimable."""
        manual = self.needs_manual_clock(clock)
        pool = hive.pool("jobs")
        await pool.push_many(["a", "b"])
        a = await self.must_claim(pool, "w1", lease=10.0)
        b = await self.must_claim(pool, "w1", lease=10.0)
        manual.advance(10.0)
        assert await hive.now() == a.lease_expires_at == b.lease_expires_at
        for action in (pool.complete(a), pool.fail(a, "x"), pool.release(a), pool.extend(a, 30.0)):
            with pytest.raises(LeaseLost):
                await action
        await hive.workers.register(worker_id="w1")
        await hive.workers.heartbeat("w1")  # an expired lease is not renewed, even at the boundary
        again = await self.must_claim(pool, "w2")
        assert again.id == a.id and again.attempts == 2
        assert (await self.must_claim(pool, "w2")).id == b.id

    @pytest.mark.asyncio
    async def test_a_forged_token_cannot_release_or_extend(self, hive: Hive) -> None:
        """[A1] the token check guards release and extend as well."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        for forged in (attrs.evolve(item, token=item.token + 1), attrs.evolve(item, token=item.token - 1)):
            with pytest.raises(LeaseLost):
                await pool.release(forged)
            with pytest.raises(LeaseLost):
                await pool.extend(forged, 500.0)
        assert await self.raw(hive, "jobs", item.id) == item
