"""Durable steps: rules ST1-ST6 of the storage contract (optional: ``workhive.storage.KeepsSteps``).

A step is stored with an item under a key, fenced by the claim's token, kept
across claims and removed with the item. Backends without the capability skip
this family (``ctx.step`` then raises ``StepsUnsupported``).

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import attrs
import pytest

from workhive.errors import InvalidArgument, InvalidItem, LeaseLost, StepsUnsupported
from workhive.hive import Hive
from workhive.models import ItemState, StepRecord
from workhive.pool import Pool
from workhive.steps import MAX_STEP_CHARS, MAX_STEP_KEY_CHARS
from workhive.storage import KeepsSteps
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class StepRules(ContractBase):
    """Rules ST1-ST6: durable steps, fenced by the claim, kept across claims, removed with the item."""

    @staticmethod
    def keeper(hive: Hive) -> KeepsSteps:
        """The backend as a ``KeepsSteps``, or skip: the capability is optional."""
        backend = hive.storage
        if not isinstance(backend, KeepsSteps):
            pytest.skip("this backend keeps no durable steps (optional capability KeepsSteps)")
        return backend

    @staticmethod
    def pairs(steps: list[StepRecord]) -> list[tuple[str, object, bool]]:
        return [(s.key, s.value, s.failed) for s in steps]

    @pytest.mark.asyncio
    async def test_step_put_stores_a_step_under_the_claim(self, hive: Hive) -> None:
        """[ST1] a step written under the current claim is stored with its token, its time and ``failed``."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        item_id = await pool.push("x")
        assert await backend.step_list("jobs", item_id) == []
        item = await self.must_claim(pool)
        before = await hive.now()
        await pool.put_step(item, "search", {"hits": [1, 2], "q": "é"})
        await pool.put_step(item.receipt, "check", "bad input", failed=True)
        steps = await backend.step_list("jobs", item_id)
        assert self.pairs(steps) == [("search", {"hits": [1, 2], "q": "é"}, False), ("check", "bad input", True)]
        assert all(s.token == item.token for s in steps)
        assert all(s.stored_at >= before - self.clock_drift for s in steps)
        assert steps == await pool.steps(item_id)
        # The item itself is untouched: still claimed under the same lease.
        assert await self.raw(hive, "jobs", item_id) == item

    @pytest.mark.asyncio
    async def test_steps_of_several_items_and_pools_are_apart(self, hive: Hive) -> None:
        """[ST1] each item has its own steps; a claim presented through another pool stores nothing."""
        backend = self.keeper(hive)
        jobs, other = hive.pool("jobs"), hive.pool("other")
        a_id, b_id = await jobs.push_many(["a", "b"])
        c_id = await other.push("c")
        a, b, c = await self.must_claim(jobs), await self.must_claim(jobs), await self.must_claim(other)
        await jobs.put_step(a, "k", 1)
        await jobs.put_step(b, "k", 2)
        await other.put_step(c, "k", 3)
        assert not await backend.step_put("other", a.id, a.token, "x", "9", False)  # a's claim, wrong pool
        assert not await backend.step_put("jobs", c.id, c.token, "x", "9", False)
        assert self.pairs(await backend.step_list("jobs", a_id)) == [("k", 1, False)]
        assert self.pairs(await backend.step_list("jobs", b_id)) == [("k", 2, False)]
        assert self.pairs(await backend.step_list("other", c_id)) == [("k", 3, False)]
        assert await backend.step_list("other", a_id) == []  # get is scoped to its pool (G1); so are steps
        assert await backend.step_list("jobs", "i00000000ffffffff") == []

    @pytest.mark.asyncio
    async def test_a_stale_claim_cannot_store_a_step(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[ST2] a superseded or forged token stores nothing (``LeaseLost`` through the pool); the holder's does."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        stale, current = await self.superseded_claim(pool, clock, lease)
        with pytest.raises(LeaseLost, match="claimed again"):
            await pool.put_step(stale, "search", "old")
        assert not await backend.step_put("jobs", stale.id, current.token + 1, "search", '"forged"', False)
        assert await backend.step_list("jobs", stale.id) == []
        await pool.put_step(current, "search", "new")
        assert self.pairs(await backend.step_list("jobs", stale.id)) == [("search", "new", False)]
        assert (await self.raw(hive, "jobs", stale.id)) == current

    @pytest.mark.asyncio
    async def test_an_expired_claim_cannot_store_a_step(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[ST2] once its lease has run out (nobody claimed it since), the claim stores no step."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        item_id = await pool.push("x")
        item = await self.must_claim(pool, lease=lease)
        await pool.put_step(item, "first", 1)
        await self.elapse(clock, lease * 1.5)
        with pytest.raises(LeaseLost):
            await pool.put_step(item, "second", 2)
        assert self.pairs(await backend.step_list("jobs", item_id)) == [("first", 1, False)]

    @pytest.mark.asyncio
    async def test_a_finished_item_takes_no_step(self, hive: Hive) -> None:
        """[ST2] after complete, fail (retry or poison) or release, the old token stores nothing."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        ids = await pool.push_many(["done", "retry", "poison", "released"])
        done, retry, poison, released = [await self.must_claim(pool) for _ in ids]
        await pool.complete(done, "r")
        await pool.fail(retry, "boom", retry_in=60.0)
        await pool.fail(poison, "boom", poison=True)
        await pool.release(released, delay=60.0)
        for claim in (done, retry, poison, released):
            with pytest.raises(LeaseLost):
                await pool.put_step(claim, "late", True)
            assert await backend.step_list("jobs", claim.id) == []
        assert [(await self.raw(hive, "jobs", i)).state for i in ids] == [
            ItemState.DONE,
            ItemState.PENDING,
            ItemState.POISONED,
            ItemState.PENDING,
        ]

    @pytest.mark.asyncio
    async def test_a_stored_step_keeps_its_first_value(self, hive: Hive) -> None:
        """[ST3] writing a key again under a valid claim answers True and keeps the first value."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        item_id = await pool.push("x")
        item = await self.must_claim(pool)
        assert await backend.step_put("jobs", item_id, item.token, "k", '"first"', False)
        assert await backend.step_put("jobs", item_id, item.token, "k", '"second"', True)
        assert self.pairs(await backend.step_list("jobs", item_id)) == [("k", "first", False)]

    @pytest.mark.asyncio
    async def test_step_list_survives_a_new_claim_in_store_order(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[ST4] steps come back in the order they were stored, across claims, each with its writer's token."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        item_id = await pool.push("x")
        first = await self.must_claim(pool, lease=lease)
        for key in ("zeta", "alpha", "mid"):  # store order, not key order
            await pool.put_step(first, key, key.upper())
        await self.elapse(clock, lease * 1.5)
        second = await self.must_claim(pool, "w2", lease=lease * 20)
        assert second.id == item_id and second.token > first.token
        await pool.put_step(second, "beta", None)
        steps = await backend.step_list("jobs", item_id)
        assert [s.key for s in steps] == ["zeta", "alpha", "mid", "beta"]
        assert [s.token for s in steps] == [first.token] * 3 + [second.token]
        await pool.complete(second, "ok")
        assert await backend.step_list("jobs", item_id) == steps

    @pytest.mark.asyncio
    async def test_steps_survive_release_fail_and_expiry(self, hive: Hive, clock: ManualClock | None) -> None:
        """[ST4] a release, a failure, a poisoning and a requeue keep every stored step."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        item_id = await pool.push("x")
        item = await self.must_claim(pool)
        await pool.put_step(item, "a", 1)
        await pool.release(item)
        item = await self.must_claim(pool)
        await pool.put_step(item, "b", 2)
        await pool.fail(item, "boom", retry_in=0.0)
        item = await self.must_claim(pool)
        await pool.put_step(item, "c", 3)
        await pool.fail(item, "dead", poison=True)
        assert await pool.requeue([item_id]) == 1
        expected = [("a", 1, False), ("b", 2, False), ("c", 3, False)]
        assert self.pairs(await backend.step_list("jobs", item_id)) == expected

    @pytest.mark.asyncio
    async def test_purge_removes_the_steps_with_the_item(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[ST5] purge deletes a finished item's steps with it; a live item's stay."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        done_id, dead_id, live_id = await pool.push_many(["done", "dead", "live"])
        done, dead, live = [await self.must_claim(pool, lease=lease * 100) for _ in range(3)]
        for claim in (done, dead, live):
            await pool.put_step(claim, "s", claim.data)
        await pool.complete(done, None)
        await pool.fail(dead, "x", poison=True)
        await self.elapse(clock, lease * 1.5)
        assert await pool.purge(older_than=lease) == 2
        assert await backend.step_list("jobs", done_id) == []
        assert await backend.step_list("jobs", dead_id) == []
        assert self.pairs(await backend.step_list("jobs", live_id)) == [("s", "live", False)]
        assert await backend.step_clear("jobs", [done_id, dead_id]) == 0

    @pytest.mark.asyncio
    async def test_step_clear_takes_only_finished_items(self, hive: Hive) -> None:
        """[ST5] step_clear removes the steps of finished items only, and counts them."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        done_id, live_id, pending_id = await pool.push_many(["done", "live", "pending"])
        done, live, pending = [await self.must_claim(pool) for _ in range(3)]
        for claim in (done, live, pending):
            await pool.put_step(claim, "one", 1)
            await pool.put_step(claim, "two", 2)
        await pool.complete(done, None)
        await pool.release(pending)
        assert await backend.step_clear("jobs", [done_id, live_id, pending_id, "i00000000ffffffff"]) == 2
        assert await backend.step_list("jobs", done_id) == []
        assert len(await backend.step_list("jobs", live_id)) == 2
        assert len(await backend.step_list("jobs", pending_id)) == 2
        assert await backend.step_clear("other", [live_id]) == 0
        assert await backend.step_clear("jobs", []) == 0

    @pytest.mark.asyncio
    async def test_requeue_fresh_forgets_the_steps(self, hive: Hive) -> None:
        """[ST5] ``requeue(fresh=True)`` (given ids, or all) drops the requeued items' steps."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        ids = await pool.push_many(["a", "b", "c"])
        for _ in ids:
            item = await self.must_claim(pool)
            await pool.put_step(item, "s", item.data)
            await pool.fail(item, "dead", poison=True)
        assert await pool.requeue([ids[0]], fresh=True) == 1
        assert await backend.step_list("jobs", ids[0]) == []
        assert await pool.requeue(fresh=True) == 2
        assert [await backend.step_list("jobs", i) for i in ids[1:]] == [[], []]
        assert (await pool.stats()).pending == 3

    @pytest.mark.asyncio
    async def test_bad_step_input_changes_nothing(self, hive: Hive) -> None:
        """[ST6] a bad key or value is refused before the backend is called: no step stored, the claim kept."""
        backend = self.keeper(hive)
        pool = hive.pool("jobs")
        item_id = await pool.push("x")
        item = await self.must_claim(pool)
        for key in ("", "   ", "x" * (MAX_STEP_KEY_CHARS + 1), "a\nb", "\ud800", 3, None):
            with pytest.raises(InvalidArgument):
                await pool.put_step(item, key, 1)  # type: ignore[arg-type]
        for value in ({1, 2}, float("nan"), object(), b"bytes", "y" * MAX_STEP_CHARS):
            with pytest.raises(InvalidItem):
                await pool.put_step(item, "k", value)
        assert await backend.step_list("jobs", item_id) == []
        assert await self.raw(hive, "jobs", item_id) == item
        await pool.put_step(item, "k", "y" * (MAX_STEP_CHARS - 2))  # the largest that fits (two quotes)
        assert len((await backend.step_list("jobs", item_id))[0].payload) == MAX_STEP_CHARS

    @pytest.mark.asyncio
    async def test_steps_on_a_backend_without_them_are_refused(self, hive: Hive) -> None:
        """[ST6] through a backend lacking the capability, every step call is ``StepsUnsupported``, naming it."""
        pool = hive.pool("jobs")
        item_id = await pool.push("x")
        item = await self.must_claim(pool)
        bare = Hive(_WithoutSteps(hive.storage), manager=hive.manager)  # type: ignore[arg-type]
        bare_pool: Pool = bare.pool("jobs")
        with pytest.raises(StepsUnsupported, match="_WithoutSteps keeps no durable steps"):
            await bare_pool.put_step(item, "k", 1)
        with pytest.raises(StepsUnsupported):
            await bare_pool.steps(item_id)
        await pool.fail(item, "dead", poison=True)
        with pytest.raises(StepsUnsupported):
            await bare_pool.requeue([item_id], fresh=True)
        assert (await self.raw(hive, "jobs", item_id)).state is ItemState.POISONED  # nothing moved
        if isinstance(hive.storage, KeepsSteps):
            assert await hive.storage.step_list("jobs", item_id) == []


@attrs.define
class _WithoutSteps:
    """A backend's every contract method, without the step methods (a backend that predates them)."""

    inner: object

    def __getattr__(self, name: str) -> object:
        if name.startswith("step_"):
            raise AttributeError(name)
        return getattr(self.inner, name)
