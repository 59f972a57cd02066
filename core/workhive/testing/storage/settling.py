"""Settling a claim: rules D1-D3, E1-E2, S1 of the storage contract.

Complete, fail, release and extend, and the fields each leaves behind.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import pytest

from workhive.errors import LeaseLost
from workhive.hive import Hive
from workhive.models import ItemState, Job
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class SettlingRules(ContractBase):
    """Rules D1-D3, E1-E2, S1: complete, fail, release and extend, and the fields each leaves behind."""

    @pytest.mark.asyncio
    async def test_complete_keeps_the_result_and_twice_is_rejected(self, hive: Hive) -> None:
        """[D1] complete makes the item DONE with its result and finish time, lease cleared.

        A second complete of the same claim is refused.
        """
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        await pool.complete(item, {"summary": "ok", "score": 0.5})
        done = await pool.get(item.id)
        assert done.state is ItemState.DONE
        assert done.result == {"summary": "ok", "score": 0.5}
        assert done.finished_at is not None and done.lease_expires_at is None
        assert done.attempts == 1
        with pytest.raises(LeaseLost, match="completed already"):
            await pool.complete(item, "again")
        assert await pool.get(item.id) == done
        stats = await pool.stats()
        assert (stats.done, stats.claimed, stats.pending) == (1, 0, 0)

    @pytest.mark.asyncio
    async def test_complete_without_result(self, hive: Hive) -> None:
        """[D1] completing without a result stores None."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        await pool.complete(item)
        assert (await pool.get(item.id)).result is None

    @pytest.mark.asyncio
    async def test_complete_many_accepts_valid_and_refuses_stale(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[D1] a batch of acks is answered ack by ack: the stale one is refused, the others are kept."""
        pool = hive.pool("jobs")
        await pool.push_many(["a", "b", "c"])
        a = await self.must_claim(pool, "w1", lease=lease)
        rest = await pool.claim_many(2, "w1", lease=lease * 20)
        await self.elapse(clock, lease * 1.5)
        a_again = await self.must_claim(pool, "w2", lease=lease * 20)
        assert a_again.id == a.id
        accepted = await pool.complete_many([(a, "stale"), (rest[0], 1), (rest[1], None)])
        assert accepted == [False, True, True]
        assert (await pool.get(a.id)).state is ItemState.CLAIMED
        assert (await pool.get(rest[0].id)).result == 1
        assert await pool.complete_many([]) == []
        stats = await pool.stats()
        assert (stats.done, stats.claimed) == (2, 1)

    @pytest.mark.asyncio
    async def test_attempts_count_per_claim_and_fail_poisons_when_spent(self, hive: Hive) -> None:
        """[D2] every claim counts an attempt; fail retries while attempts are left.

        On the last attempt fail poisons the item; the error is kept either way.
        """
        pool = hive.pool("jobs")
        item_id = await pool.push("x", max_attempts=3)
        for attempt in (1, 2):
            item = await self.must_claim(pool)
            assert item.attempts == attempt
            assert await pool.fail(item, RuntimeError(f"boom {attempt}"), retry_in=0) is ItemState.PENDING
            after = await pool.get(item_id)
            assert after.state is ItemState.PENDING and after.attempts == attempt
            assert after.error == f"RuntimeError: boom {attempt}"
        item = await self.must_claim(pool)
        assert item.attempts == 3
        assert await pool.fail(item, "last straw", retry_in=0) is ItemState.POISONED
        dead = await pool.get(item_id)
        assert dead.state is ItemState.POISONED and dead.error == "last straw"
        assert dead.finished_at is not None
        assert await pool.claim("w1") is None
        assert (await pool.stats()).poisoned == 1

    @pytest.mark.asyncio
    async def test_fail_schedules_a_retry_after_the_delay(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[D2] a failed item is PENDING again at ``now + retry_in``, without holder or lease."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        before = await hive.now()
        assert await pool.fail(item, ValueError("bad gateway"), retry_in=lease) is ItemState.PENDING
        later = await hive.now()
        after = await pool.get(item.id)
        assert self.within(after.available_at, before + lease, later + lease)
        assert after.claimed_by is None and after.lease_expires_at is None
        assert await pool.claim("w1") is None
        stats = await pool.stats()
        assert (stats.delayed, stats.claimed) == (1, 0)
        await self.elapse(clock, lease * 1.5)
        again = await self.must_claim(pool)
        assert again.id == item.id and again.attempts == 2 and again.error == "ValueError: bad gateway"

    @pytest.mark.asyncio
    async def test_fail_with_poison_dead_letters_at_once(self, hive: Hive) -> None:
        """[D2] ``poison=True`` poisons the item whatever attempts are left."""
        pool = hive.pool("jobs")
        await pool.push("x", max_attempts=10)
        item = await self.must_claim(pool)
        assert await pool.fail(item, "never works", poison=True) is ItemState.POISONED
        assert (await pool.get(item.id)).state is ItemState.POISONED
        with pytest.raises(LeaseLost, match="poisoned"):
            await pool.complete(item)

    @pytest.mark.asyncio
    async def test_release_refunds_the_attempt(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[D3] release makes the item PENDING at ``now + delay``, gives the attempt back and counts a release."""
        pool = hive.pool("jobs")
        await pool.push("x", max_attempts=1)
        item = await self.must_claim(pool)
        await pool.release(item)
        back = await pool.get(item.id)
        assert back.state is ItemState.PENDING and back.attempts == 0 and back.releases == 1
        again = await self.must_claim(pool)
        assert again.attempts == 1 and again.token > item.token
        await pool.release(again, delay=lease)
        assert await pool.claim("w1") is None
        assert (await pool.stats()).delayed == 1
        await self.elapse(clock, lease * 1.5)
        assert (await self.must_claim(pool)).releases == 2
        with pytest.raises(LeaseLost):
            await pool.release(again)

    @pytest.mark.asyncio
    async def test_extend_moves_the_expiry(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[E1] extend sets the expiry to ``now + lease`` and returns it; the item stays held past the first lease."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool, lease=lease)
        now = await hive.now()
        expiry = await pool.extend(item, lease * 4)
        if clock is not None:
            assert self.same_time(expiry, now + lease * 4)
        assert expiry > item.lease_expires_at  # type: ignore[operator]
        assert (await pool.get(item.id)).lease_expires_at == expiry
        await self.elapse(clock, lease * 1.5)  # past the first lease, inside the extended one
        assert await pool.claim("w2") is None
        await pool.complete(item)

    @pytest.mark.asyncio
    async def test_extend_sets_the_lease_that_heartbeats_renew(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[E1] extend sets lease_seconds too, or the next heartbeat would shrink the lease back."""
        pool = hive.pool("jobs")
        await hive.workers.register(worker_id="w1")
        await pool.push("x")
        item = await self.must_claim(pool, "w1", lease=lease)
        await pool.extend(item, lease * 4)
        assert (await self.raw(hive, "jobs", item.id)).lease_seconds == lease * 4
        await self.elapse(clock, lease * 1.5)
        before = await hive.now()
        await hive.workers.heartbeat("w1")
        later = await hive.now()
        raw = await self.raw(hive, "jobs", item.id)
        assert raw.lease_seconds == lease * 4
        assert self.within(raw.lease_expires_at, before + lease * 4, later + lease * 4)

    @pytest.mark.asyncio
    async def test_an_extended_lease_still_expires(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[E2] after extend the item is claimable again once the new expiry passes (nothing is held forever)."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool, "w1", lease=lease)
        expiry = await pool.extend(item, lease * 2)
        await self.elapse(clock, lease * 1.5)
        assert await pool.claim("w2") is None
        await self.elapse(clock, lease * 1.5)
        assert await hive.now() > expiry
        again = await self.must_claim(pool, "w2")
        assert again.id == item.id and again.attempts == 2 and again.token > item.token

    @pytest.mark.asyncio
    async def test_leaving_claimed_clears_the_lease_and_pending_clears_the_holder(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[S1] PENDING never has claimed_by or a lease; DONE/POISONED keep the last holder, not the lease."""
        pool = hive.pool("jobs")
        await hive.workers.register(worker_id="w1")
        failed, released, finished, poisoned, by_worker = await pool.push_many(
            ["f", "r", "d", Job("p", max_attempts=1), "b"]
        )
        other = hive.pool("other")
        expired = await other.push("e", max_attempts=1)
        await pool.fail(await self.must_claim(pool, "w1"), "x", retry_in=lease * 100)
        await pool.release(await self.must_claim(pool, "w1"), delay=lease * 100)
        await pool.complete(await self.must_claim(pool, "w1"), "ok")
        await pool.fail(await self.must_claim(pool, "w1"), "x")
        await self.must_claim(pool, "w1")
        assert await pool.release_by_worker("w1") == 1
        await self.must_claim(other, "w9", lease=lease)
        await self.elapse(clock, lease * 1.5)
        assert await other.claim("w2") is None  # settles the spent expiry: poisoned
        for item_id in (failed, released, by_worker):
            item = await pool.get(item_id)
            assert item.state is ItemState.PENDING
            assert (item.claimed_by, item.lease_expires_at, item.lease_seconds) == (None, None, None), item
        for item_id, state in (
            (finished, ItemState.DONE),
            (poisoned, ItemState.POISONED),
            (expired, ItemState.POISONED),
        ):
            item = await (other if item_id == expired else pool).get(item_id)
            assert item.state is state and item.finished_at is not None
            assert (item.lease_expires_at, item.lease_seconds) == (None, None), item
        assert (await pool.get(finished)).claimed_by == "w1"
        assert (await other.get(expired)).claimed_by == "w9"
