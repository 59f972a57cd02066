"""Cancellation: rules Z1-Z3 of the storage contract (the optional ``Cancels`` capability).

A pending or claimed item becomes CANCELLED, a terminal state that is kept,
listed, counted, requeueable by id and purged by age; a cancelled claim's
holder is refused as any lost claim's is. Backends without ``cancel`` skip
this family.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import pytest

from workhive.errors import ConfigError, InvalidArgument, ItemNotFound, LeaseLost
from workhive.hive import Hive
from workhive.models import ItemState, WorkerRegistration
from workhive.storage import Cancels
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class CancelRules(ContractBase):
    """Rules Z1-Z3: cancelling pending and claimed items."""

    @staticmethod
    def needs_cancel(hive: Hive) -> None:
        if not isinstance(hive.storage, Cancels):
            pytest.skip("the backend does not implement the optional cancel (workhive.storage.Cancels)")

    @pytest.mark.asyncio
    async def test_cancel_takes_pending_and_claimed_items(self, hive: Hive, lease: float) -> None:
        """[Z1] a pending, a delayed and a claimed item become CANCELLED; the claimed one keeps its holder and token."""
        self.needs_cancel(hive)
        pool = hive.pool("jobs")
        held_id, ready_id = await pool.push_many(["held", "ready"])
        delayed_id = await pool.push("later", delay=1000)
        held = await self.must_claim(pool, "w1", lease=lease * 20)
        assert held.id == held_id
        before = await hive.storage.now()
        outcome = await pool.cancel([ready_id, held_id, delayed_id, ready_id])
        after = await hive.storage.now()
        assert outcome == {ready_id: ItemState.PENDING, held_id: ItemState.CLAIMED, delayed_id: ItemState.PENDING}
        for item_id in (ready_id, held_id, delayed_id):
            item = await self.raw(hive, "jobs", item_id)
            assert item.state is ItemState.CANCELLED
            assert self.within(item.finished_at, before, after)
            assert item.lease_expires_at is None and item.lease_seconds is None
        cancelled_claim = await self.raw(hive, "jobs", held_id)
        assert cancelled_claim.claimed_by == "w1" and cancelled_claim.token == held.token
        assert (await self.raw(hive, "jobs", ready_id)).claimed_by is None
        stats = await pool.stats()
        assert (stats.pending, stats.delayed, stats.claimed, stats.cancelled) == (0, 0, 0, 3)
        assert await pool.claim("w2") is None  # nothing claimable is left

    @pytest.mark.asyncio
    async def test_cancel_reports_finished_and_unknown_ids_and_changes_nothing(self, hive: Hive) -> None:
        """[Z1] the backend returns finished items' states and None for unknown ids; the facade refuses them whole."""
        self.needs_cancel(hive)
        pool = hive.pool("jobs")
        done_id, dead_id, live_id = await pool.push_many(["done", "dead", "live"])
        await pool.complete(await self.must_claim(pool), {"ok": True})
        await pool.fail(await self.must_claim(pool), "boom", poison=True)
        other = await hive.pool("other").push("elsewhere")
        raw = await hive.storage.cancel("jobs", [done_id, dead_id, other, "i" + "f" * 16])  # type: ignore[attr-defined]
        assert raw == [ItemState.DONE, ItemState.POISONED, None, None]
        assert (await self.raw(hive, "jobs", done_id)).state is ItemState.DONE
        assert (await self.raw(hive, "jobs", dead_id)).state is ItemState.POISONED
        assert (await self.raw(hive, "other", other)).state is ItemState.PENDING
        before = await self._snapshot(hive)
        with pytest.raises(ItemNotFound, match=other):
            await pool.cancel([live_id, other])
        with pytest.raises(InvalidArgument, match=f"{done_id} is done"):
            await pool.cancel([live_id, done_id])
        with pytest.raises(InvalidArgument, match="item ids"):
            await pool.cancel([live_id, 7])  # type: ignore[list-item]
        with pytest.raises(InvalidArgument, match="takes a list"):
            await pool.cancel(live_id)
        assert await self._snapshot(hive) == before  # nothing was cancelled
        assert await pool.cancel([live_id]) == {live_id: ItemState.PENDING}
        with pytest.raises(InvalidArgument, match="already cancelled"):
            await pool.cancel([live_id])

    @pytest.mark.asyncio
    async def test_a_cancelled_claim_refuses_its_holder_and_is_not_renewed(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[Z2] the holder can no longer complete, fail, release or extend; heartbeat and reap leave the item be."""
        self.needs_cancel(hive)
        pool = hive.pool("jobs")
        await hive.workers.register(WorkerRegistration(worker_id="w1"))
        await pool.push_many(["a", "b"])
        item = await self.must_claim(pool, "w1", lease=lease)
        await pool.cancel([item.id])
        with pytest.raises(LeaseLost):
            await pool.complete(item, "late")
        with pytest.raises(LeaseLost):
            await pool.fail(item, "late")
        with pytest.raises(LeaseLost):
            await pool.release(item)
        with pytest.raises(LeaseLost):
            await pool.extend(item, lease=lease)
        await hive.workers.heartbeat("w1")
        await self.elapse(clock, lease * 1.5)
        await hive.workers.reap(lease)
        after = await self.raw(hive, "jobs", item.id)
        assert after.state is ItemState.CANCELLED and after.result_payload is None
        assert after.token == item.token and after.attempts == item.attempts
        assert (await pool.stats()).cancelled == 1

    @pytest.mark.asyncio
    async def test_cancelled_items_are_listed_counted_requeued_and_purged(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[Z3] dedup key freed, listed, counted, requeued by id only (not by requeue(None)), purged by age."""
        self.needs_cancel(hive)
        pool = hive.pool("jobs")
        first = await pool.push("a", dedup_key="k")
        second = await pool.push("b")
        await pool.cancel([first, second])
        assert [i.id for i in await pool.items(ItemState.CANCELLED)] == [first, second]
        assert (await pool.stats()).cancelled == 2
        fresh = await pool.push("c", dedup_key="k")
        assert fresh != first  # the cancelled item freed its key
        await pool.cancel([fresh])
        assert await pool.requeue() == 0  # requeue(None) takes poisoned items only
        assert await pool.requeue([first]) == 1
        back = await self.raw(hive, "jobs", first)
        assert back.state is ItemState.PENDING and back.attempts == 0 and back.finished_at is None
        assert await pool.push("d", dedup_key="k") == first  # requeued: it holds its key again
        assert (await pool.stats()).cancelled == 2
        await self.elapse(clock, lease * 1.5)
        assert await pool.purge(older_than=lease) == 2
        stats = await pool.stats()
        assert (stats.pending, stats.cancelled) == (1, 0)
        with pytest.raises(ItemNotFound):
            await pool.get(second)

    @pytest.mark.asyncio
    async def test_cancel_on_a_backend_without_it_is_a_config_error(self, hive: Hive) -> None:
        """[Z1] a backend without ``cancel`` makes ``Pool.cancel`` a ConfigError naming the backend; nothing changes."""
        if isinstance(hive.storage, Cancels):
            pytest.skip("the backend implements cancel")
        pool = hive.pool("jobs")
        item_id = await pool.push("a")
        with pytest.raises(ConfigError, match="cannot cancel"):
            await pool.cancel([item_id])
        assert (await pool.get(item_id)).state is ItemState.PENDING
