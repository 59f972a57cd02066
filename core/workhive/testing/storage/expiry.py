"""Lease expiry: rules X1-X3 of the storage contract.

What an expired lease becomes, and when.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import pytest

from workhive.hive import Hive
from workhive.models import ItemState, Job
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class ExpiryRules(ContractBase):
    """Rules X1-X3: what an expired lease becomes, and when."""

    @pytest.mark.asyncio
    async def test_expired_lease_is_claimable_again_with_a_higher_token(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[C2][X1] an expired lease is never honoured: the item is claimable again.

        The new claim has a higher token, and the expired attempt still counts.
        """
        pool = hive.pool("jobs")
        await pool.push("x")
        first = await self.must_claim(pool, "w1", lease=lease)
        assert await pool.claim("w2", lease=lease) is None  # held by an unexpired lease
        await self.elapse(clock, lease * 1.5)
        second = await self.must_claim(pool, "w2", lease=lease)
        assert second.id == first.id
        assert second.token > first.token
        assert second.attempts == 2 and second.claimed_by == "w2"

    @pytest.mark.asyncio
    async def test_repeated_lease_expiry_poisons_the_item(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[X3] an item whose every attempt ended in an expired lease is poisoned and listed as dead."""
        pool = hive.pool("jobs")
        item_id = await pool.push("crashes its worker", max_attempts=2)
        for attempt in (1, 2):
            item = await self.must_claim(pool, f"w{attempt}", lease=lease)
            assert item.attempts == attempt
            await self.elapse(clock, lease * 1.5)  # the worker died: no complete, no fail
        assert await pool.claim("w3", lease=lease) is None
        dead = await pool.get(item_id)
        assert dead.state is ItemState.POISONED
        assert dead.error and "lease" in dead.error.lower()
        assert [i.id for i in await pool.dead()] == [item_id]

    @pytest.mark.asyncio
    async def test_an_expired_claim_is_available_from_its_expiry_not_from_when_it_is_noticed(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[X2] settled at any later time, an expired claim queues as if it had come back at its expiry."""
        pool = hive.pool("jobs")
        await pool.push("abandoned")
        abandoned = await self.must_claim(pool, "w1", lease=lease)
        await self.elapse(clock, lease * 1.5)  # expired at lease; nobody has looked yet
        newer = await pool.push("pushed after the expiry")
        await self.elapse(clock, lease)
        again = await self.must_claim(pool, "w2")
        assert again.id == abandoned.id, "the expired claim came back at its expiry, before the newer push"
        assert again.available_at == abandoned.lease_expires_at
        assert (await self.must_claim(pool, "w2")).id == newer

    @pytest.mark.asyncio
    async def test_an_expired_lease_poisons_with_a_lease_expired_error(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[X3] the error of an item poisoned by its last lease running out says "lease expired"."""
        pool = hive.pool("jobs")
        item_id = await pool.push("x", max_attempts=1)
        await self.must_claim(pool, lease=lease)
        await self.elapse(clock, lease * 1.5)
        assert await pool.claim("w2") is None
        dead = await pool.get(item_id)
        assert dead.state is ItemState.POISONED and dead.attempts == 1
        assert dead.error is not None and "lease expired" in dead.error.lower(), dead.error

    @pytest.mark.asyncio
    async def test_a_spent_expired_lease_first_in_order_does_not_hide_the_items_after_it(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[C1][X3] spent expired leases ahead in claim order are poisoned, and the claim still takes what follows.

        A backend that settles expiries as it reads its claim order must not count
        the ones it poisons against ``limit`` (nor return nothing while items wait).
        """
        pool = hive.pool("jobs")
        await pool.push_many([Job("spent 1", priority=5, max_attempts=1), Job("spent 2", priority=5, max_attempts=1)])
        spent = await pool.claim_many(2, "w1", lease=lease)
        assert len(spent) == 2
        holder = await pool.push("held", priority=9)
        held = await self.must_claim(pool, "w2", lease=lease * 50)
        assert held.id == holder
        await pool.push_many(["a", "b", "c"])
        await self.elapse(clock, lease * 1.5)
        taken = await pool.claim_many(2, "w3")
        assert [item.data for item in taken] == ["a", "b"]
        for item in spent:
            assert (await pool.get(item.id)).state is ItemState.POISONED
        await pool.push("spent 3", priority=5, max_attempts=1)
        await self.must_claim(pool, "w1", lease=lease)
        await self.elapse(clock, lease * 1.5)
        following = await pool.complete_and_claim(held, "ok", "w2")
        assert following is not None and following.data == "c"
        assert (await pool.stats()).poisoned == 3
