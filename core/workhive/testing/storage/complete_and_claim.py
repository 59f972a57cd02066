"""complete_and_claim: rules O1 of the storage contract.

The worker loop in one call, native or composed by the facade.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import asyncio
import math
import pathlib

import attrs
import pytest

from workhive.errors import InvalidArgument, InvalidItem, LeaseLost
from workhive.hive import Hive
from workhive.hookspecs import hookimpl
from workhive.models import Ack, ItemState, Job, WorkItem
from workhive.plugin_manager import PluginManager
from workhive.storage import CompletesAndClaims
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class _ItemRecorder:
    """An in-code plugin that records claimed and completed events as (event, item id, token)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []

    @hookimpl
    def workhive_item_claimed(self, pool: str, item: WorkItem, worker_id: str) -> None:
        self.events.append(("claimed", item.id, item.token))

    @hookimpl
    def workhive_item_completed(self, pool: str, item: WorkItem) -> None:
        self.events.append(("completed", item.id, item.token))


class CompleteAndClaimRules(ContractBase):
    """Rules O1: the worker loop in one call, native or composed by the facade."""

    @pytest.mark.asyncio
    async def test_complete_and_claim_completes_and_hands_out_the_next(self, hive: Hive) -> None:
        """[O1] the ack is completed and the next item claimed, as stored, under its own token."""
        pool = hive.pool("jobs")
        first_id, second_id = await pool.push_many(["a", "b"])
        first = await self.must_claim(pool, "w1")
        before = await hive.now()
        second = await pool.complete_and_claim(first, {"out": 1}, "w2", lease=30.0)
        assert second is not None and second.id == second_id and second.data == "b"
        assert second.state is ItemState.CLAIMED and second.claimed_by == "w2" and second.attempts == 1
        assert second.lease_expires_at is not None and second.lease_expires_at >= before + 30.0
        assert await self.raw(hive, "jobs", second_id) == second  # what it returns is what was stored
        done = await pool.get(first_id)
        assert done.state is ItemState.DONE and done.result == {"out": 1} and done.finished_at is not None
        # The new claim is its own: the first's token does not reach it, its own completes it.
        with pytest.raises(LeaseLost):
            await pool.complete(attrs.evolve(second, token=first.token + 1000))
        await pool.complete(second, "b done")
        stats = await pool.stats()
        assert (stats.pending, stats.claimed, stats.done) == (0, 0, 2)

    @pytest.mark.asyncio
    async def test_complete_and_claim_returns_none_when_nothing_is_left(self, hive: Hive) -> None:
        """[O1] with nothing left to claim the ack is still completed; a second try is refused."""
        pool = hive.pool("jobs")
        item_id = await pool.push("only")
        item = await self.must_claim(pool)
        assert await pool.complete_and_claim(item, "r", "w1") is None
        done = await pool.get(item_id)
        assert done.state is ItemState.DONE and done.result == "r"
        with pytest.raises(LeaseLost):  # completed: a second try is refused, as for complete
            await pool.complete_and_claim(item, "again", "w1")
        assert (await pool.get(item_id)).result == "r"

    @pytest.mark.asyncio
    async def test_complete_and_claim_with_a_stale_token_claims_nothing(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[O1] a refused ack (stale or forged token) claims nothing and changes nothing."""
        pool = hive.pool("jobs")
        stale, current = await self.superseded_claim(pool, clock, lease)
        waiting_id = await pool.push("y")
        before = (await self._snapshot(hive), await self.raw(hive, "jobs", current.id))
        for refused in (stale, attrs.evolve(current, token=current.token + 1000)):
            with pytest.raises(LeaseLost) as info:
                await pool.complete_and_claim(refused, "late", "w1", lease=lease)
            assert getattr(info.value, "item_id", None) == refused.id
            assert getattr(info.value, "token", None) == refused.token
        assert (await self._snapshot(hive), await self.raw(hive, "jobs", current.id)) == before
        assert (await pool.get(waiting_id)).state is ItemState.PENDING
        nxt = await pool.complete_and_claim(current, "on time", "w2")
        assert nxt is not None and nxt.id == waiting_id

    @pytest.mark.asyncio
    async def test_complete_and_claim_follows_claim_order(self, hive: Hive) -> None:
        """[O1] the items it hands out come in claim order."""
        pool = hive.pool("jobs")
        await pool.push_many(["low-1", Job("high-1", priority=5), "low-2", Job("high-2", priority=5), "low-3"])
        seen = []
        item: WorkItem | None = await self.must_claim(pool)
        while item is not None:
            seen.append(item.data)
            item = await pool.complete_and_claim(item, None, "w1")
        assert seen == ["high-1", "high-2", "low-1", "low-2", "low-3"]
        assert (await pool.stats()).done == 5

    @pytest.mark.asyncio
    async def test_complete_and_claim_reclaims_an_expired_lease(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[O1] an expired lease is claimable by it, with a higher token."""
        pool = hive.pool("jobs")
        await pool.push_many(["abandoned", "mine"])
        abandoned = await self.must_claim(pool, "w1", lease=lease)
        mine = await self.must_claim(pool, "w2", lease=lease * 20)
        await self.elapse(clock, lease * 1.5)
        again = await pool.complete_and_claim(mine, "ok", "w2", lease=lease * 20)
        assert again is not None and again.id == abandoned.id
        assert again.token > abandoned.token and again.attempts == 2 and again.claimed_by == "w2"
        with pytest.raises(LeaseLost):
            await pool.complete(abandoned)
        assert await pool.complete_and_claim(again, "ok", "w2") is None
        assert (await pool.stats()).done == 2

    @pytest.mark.asyncio
    async def test_complete_and_claim_poisons_a_spent_expired_lease(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[O1][X3] a spent expired lease ahead in claim order is poisoned, not handed out."""
        pool = hive.pool("jobs")
        await pool.push_many([Job("crashes its worker", max_attempts=1), "fine"])
        crashing = await self.must_claim(pool, "w1", lease=lease)
        fine = await self.must_claim(pool, "w2", lease=lease * 20)
        await self.elapse(clock, lease * 1.5)
        assert await pool.complete_and_claim(fine, "ok", "w2") is None
        dead = await pool.get(crashing.id)
        assert dead.state is ItemState.POISONED and dead.error and "lease" in dead.error.lower()
        assert (await pool.get(fine.id)).state is ItemState.DONE

    @pytest.mark.asyncio
    async def test_complete_and_claim_under_concurrent_tasks_finishes_each_item_once(self, hive: Hive) -> None:
        """[O1] tasks looping on it at once finish every item exactly once."""
        pool = hive.pool("jobs")
        await pool.push_many(range(40))
        handled: list[int] = []

        async def worker(name: str) -> None:
            item = await pool.claim(name)
            while item is not None:
                handled.append(item.data)
                await asyncio.sleep(0)  # let the others interleave
                item = await pool.complete_and_claim(item, name, name)

        await asyncio.gather(*(worker(f"w{i}") for i in range(4)))
        assert sorted(handled) == list(range(40))
        stats = await pool.stats()
        assert (stats.pending, stats.claimed, stats.done) == (0, 0, 40)

    @pytest.mark.asyncio
    async def test_complete_and_claim_fires_completed_then_claimed(
        self, clock: ManualClock | None, tmp_path: pathlib.Path
    ) -> None:
        """[O1] the hooks hear the completion of each item before the claim of the next."""
        recorder = _ItemRecorder()
        manager = PluginManager(entry_points=False, extra=[("item-recorder", recorder)])
        async with Hive(self.make_backend(clock, tmp_path), manager=manager) as hive:
            pool = hive.pool("jobs")
            await pool.push_many(["a", "b"])
            a = await self.must_claim(pool)
            b = await pool.complete_and_claim(a, None, "w1")
            assert b is not None
            assert await pool.complete_and_claim(b, None, "w1") is None
            with pytest.raises(LeaseLost):
                await pool.complete_and_claim(b, None, "w1")
        assert recorder.events == [
            ("claimed", a.id, a.token),
            ("completed", a.id, a.token),
            ("claimed", b.id, b.token),
            ("completed", b.id, b.token),
        ]

    @pytest.mark.asyncio
    async def test_complete_and_claim_refuses_bad_input_and_keeps_the_claim(self, hive: Hive) -> None:
        """[O1][V1] a result that is not JSON or a bad lease raises, and the claim is kept."""
        pool = hive.pool("jobs")
        await pool.push_many(["x", "y"])
        item = await self.must_claim(pool)
        before = await self._snapshot(hive)
        with pytest.raises(InvalidItem):
            await pool.complete_and_claim(item, {"bad": {1, 2}}, "w1")
        for bad in (0, -1.0, math.nan, math.inf):
            with pytest.raises(InvalidArgument, match="lease"):
                await pool.complete_and_claim(item, "ok", "w1", lease=bad)
        assert await self._snapshot(hive) == before
        assert (await pool.get(item.id)).state is ItemState.CLAIMED
        assert await pool.complete_and_claim(item, "ok", "w1") is not None

    @pytest.mark.asyncio
    async def test_native_complete_and_claim_is_all_or_nothing(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[O1] the optional backend method itself (skipped for backends without it): refusal, and limit > 1."""
        backend = hive.storage
        if not isinstance(backend, CompletesAndClaims):
            pytest.skip("this backend has no native complete_and_claim (the facade composes it)")
        pool = hive.pool("jobs")
        await pool.push_many(["a", "b", "c", "d"])
        a = await self.must_claim(pool)
        before = await self._snapshot(hive)
        refused = Ack(a.id, a.token + 1000, None)
        assert await backend.complete_and_claim("jobs", refused, "w1", 2, lease) == (False, [])
        assert await self._snapshot(hive) == before
        accepted, claimed = await backend.complete_and_claim("jobs", Ack(a.id, a.token, '"r"'), "w1", 2, lease)
        assert accepted is True and [i.data for i in claimed] == ["b", "c"]
        for item in claimed:
            assert item.state is ItemState.CLAIMED and item.claimed_by == "w1" and item.attempts == 1
            assert await self.raw(hive, "jobs", item.id) == item
        assert (await pool.get(a.id)).result == "r"
        stats = await pool.stats()
        assert (stats.pending, stats.claimed, stats.done) == (1, 2, 1)
