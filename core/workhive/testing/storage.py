"""The storage contract suite: the definition of a workhive storage backend.

Subclass ``StorageContract`` in your backend's tests and override
``make_backend``; every ``test_*`` method here then runs against your backend
through the public ``Hive``/``Pool``/``Workers`` facade, reading raw state
through the backend (``get``, ``list_items``, ``stats``) as ground truth::

    from workhive.testing import StorageContract

    class TestMyBackend(StorageContract):
        def make_backend(self, clock, tmp_path):
            return MyBackend(f"mystore:///{tmp_path}/db", clock=clock)

Capability flags (class attributes) switch optional parts:

* ``supports_manual_clock``: the backend honours an injected clock, so tests
  move time by hand. Set it False for a backend that uses its database's
  clock: time-dependent tests then wait in real time with short leases.
* ``"notify"`` in ``backend.capabilities``: ``wait_for_work`` must wake on push.
"""

from __future__ import annotations

import asyncio
import math
import pathlib
from collections.abc import Callable
from typing import Any, ClassVar

import attrs
import pytest
import pytest_asyncio

from workhive.errors import (
    InvalidArgument,
    InvalidItem,
    InvalidName,
    ItemNotFound,
    LeaseLost,
    WorkerLost,
    WorkerNotFound,
)
from workhive.hive import Hive
from workhive.hookspecs import hookimpl
from workhive.models import Ack, ItemState, Job, ReapedWorker, WorkerStatus, WorkItem
from workhive.plugin_manager import PluginManager
from workhive.pool import Pool
from workhive.storage import CompletesAndClaims, StorageBackend
from workhive.testing.clock import ManualClock

__all__ = ["StorageContract"]


class _LostRecorder:
    """An in-code plugin that records ``workhive_worker_lost`` events."""

    def __init__(self) -> None:
        self.lost: list[ReapedWorker] = []

    @hookimpl
    def workhive_worker_lost(self, worker: ReapedWorker) -> None:
        self.lost.append(worker)


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


class StorageContract:
    """Subclass in your backend's tests and override ``make_backend``."""

    #: the backend honours an injected clock (else tests wait in real time)
    supports_manual_clock: ClassVar[bool] = True
    #: a lease long enough for a test step, in seconds; time-dependent tests
    #: let 1.5 of these pass (by hand, or by sleeping when the clock is real)
    real_time_lease: ClassVar[float] = 0.3

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> StorageBackend:
        """Return an unopened backend; use ``clock`` as its clock when it is not None."""
        raise NotImplementedError("override make_backend() in your StorageContract subclass")

    # -- fixtures -----------------------------------------------------------
    @pytest.fixture
    def clock(self) -> ManualClock | None:
        return ManualClock() if self.supports_manual_clock else None

    @pytest_asyncio.fixture
    async def hive(self, clock: ManualClock | None, tmp_path: pathlib.Path) -> Any:
        async with Hive(self.make_backend(clock, tmp_path), manager=PluginManager(entry_points=False)) as hive:
            yield hive

    @pytest.fixture
    def lease(self, clock: ManualClock | None) -> float:
        """A lease that expires after ``elapse(lease * 1.5)``."""
        return 10.0 if clock is not None else self.real_time_lease

    async def elapse(self, clock: ManualClock | None, seconds: float) -> None:
        """Let ``seconds`` pass on the backend's clock."""
        if clock is not None:
            clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    # -- helpers ------------------------------------------------------------
    @staticmethod
    async def must_claim(pool: Pool, worker_id: str = "w1", lease: float | None = None) -> WorkItem:
        item = await pool.claim(worker_id, lease=lease)
        assert item is not None, "expected an item to be claimable"
        return item

    async def superseded_claim(self, pool: Pool, clock: ManualClock | None, lease: float) -> tuple[WorkItem, WorkItem]:
        """Push one item and return (a claim whose lease expired, the claim that took the item over)."""
        await pool.push("x")
        stale = await self.must_claim(pool, "w1", lease=lease)
        await self.elapse(clock, lease * 1.5)
        return stale, await self.must_claim(pool, "w2", lease=lease * 20)

    @staticmethod
    async def raw(hive: Hive, pool: str, item_id: str) -> WorkItem:
        item = await hive.storage.get(pool, item_id)
        assert item is not None, f"item {item_id} vanished from the backend"
        return item

    # ======================================================================
    # push and claim
    # ======================================================================
    @pytest.mark.asyncio
    async def test_push_stores_a_pending_item(self, hive: Hive) -> None:
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
    async def test_claim_takes_a_lease_and_a_token(self, hive: Hive, clock: ManualClock | None) -> None:
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
            assert item.lease_expires_at == now + 30.0
        else:
            assert now + 29.0 < item.lease_expires_at < now + 31.0
        assert await self.raw(hive, "jobs", item.id) == item
        stats = await pool.stats()
        assert (stats.pending, stats.claimed) == (0, 1)

    @pytest.mark.asyncio
    async def test_claim_from_an_empty_or_unknown_pool_returns_none(self, hive: Hive) -> None:
        assert await hive.pool("never-pushed").claim("w1") is None
        assert await hive.pool("never-pushed").claim_many(5, "w1") == []
        pool = hive.pool("jobs")
        await pool.push(1)
        await self.must_claim(pool)
        assert await pool.claim("w2") is None

    @pytest.mark.asyncio
    async def test_claim_order_is_priority_then_fifo(self, hive: Hive) -> None:
        pool = hive.pool("jobs")
        low1 = await pool.push("low1")
        high1 = await pool.push("high1", priority=9)
        low2 = await pool.push("low2")
        mid = await pool.push("mid", priority=3)
        high2 = await pool.push("high2", priority=9)
        order = [(await self.must_claim(pool)).id for _ in range(5)]
        assert order == [high1, high2, mid, low1, low2]

    @pytest.mark.asyncio
    async def test_delayed_item_waits_for_its_time(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
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
    async def test_available_at_orders_items_of_equal_priority(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        pool = hive.pool("jobs")
        later = await pool.push("later", delay=lease)
        sooner = await pool.push("sooner", delay=lease / 2)
        ready_last = await pool.push("ready-but-inserted-last", delay=lease * 0.75)
        await self.elapse(clock, lease * 1.5)
        assert [(await self.must_claim(pool)).id for _ in range(3)] == [sooner, ready_last, later]

    @pytest.mark.asyncio
    async def test_priority_beats_an_earlier_available_at(self, hive: Hive, clock: ManualClock | None) -> None:
        pool = hive.pool("jobs")
        old = await pool.push("old")
        await self.elapse(clock, 0.05)
        urgent = await pool.push("urgent", priority=1)
        assert (await self.must_claim(pool)).id == urgent
        assert (await self.must_claim(pool)).id == old

    @pytest.mark.asyncio
    async def test_dedup_key_returns_the_live_item(self, hive: Hive) -> None:
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
        pool = hive.pool("jobs")
        ids = await pool.push_many([Job("a", dedup_key="k"), Job("b"), Job("c", dedup_key="k"), "d"])
        assert len(ids) == 4
        assert ids[0] == ids[2]
        assert len(set(ids)) == 3
        assert (await pool.stats()).pending == 3
        assert (await pool.get(ids[0])).data == "a"

    @pytest.mark.asyncio
    async def test_dedup_key_of_a_poisoned_item_is_free(self, hive: Hive) -> None:
        pool = hive.pool("jobs")
        first = await pool.push("x", dedup_key="k")
        await pool.fail(await self.must_claim(pool), "boom", poison=True)
        assert await pool.push("y", dedup_key="k") != first

    @pytest.mark.asyncio
    async def test_push_many_and_claim_many(self, hive: Hive) -> None:
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

    # ======================================================================
    # leases and fencing
    # ======================================================================
    @pytest.mark.asyncio
    async def test_expired_lease_is_claimable_again_with_a_higher_token(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
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
    async def test_stale_token_is_rejected_and_changes_nothing(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
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
    async def test_complete_keeps_the_result_and_twice_is_rejected(self, hive: Hive) -> None:
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
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        await pool.complete(item)
        assert (await pool.get(item.id)).result is None

    @pytest.mark.asyncio
    async def test_complete_many_accepts_valid_and_refuses_stale(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
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

    # -- complete_and_claim: the worker loop in one call (native or composed) --
    @pytest.mark.asyncio
    async def test_complete_and_claim_completes_and_hands_out_the_next(self, hive: Hive) -> None:
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
        """The optional backend method itself (skipped for backends without it): refusal, and limit > 1."""
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

    @pytest.mark.asyncio
    async def test_extend_moves_the_expiry(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool, lease=lease)
        now = await hive.now()
        expiry = await pool.extend(item, lease * 4)
        if clock is not None:
            assert expiry == now + lease * 4
        assert expiry > item.lease_expires_at  # type: ignore[operator]
        assert (await pool.get(item.id)).lease_expires_at == expiry
        await self.elapse(clock, lease * 1.5)  # past the first lease, inside the extended one
        assert await pool.claim("w2") is None
        await pool.complete(item)

    @pytest.mark.asyncio
    async def test_attempts_count_per_claim_and_fail_poisons_when_spent(self, hive: Hive) -> None:
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
    async def test_repeated_lease_expiry_poisons_the_item(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
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
    async def test_fail_schedules_a_retry_after_the_delay(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        now = await hive.now()
        assert await pool.fail(item, ValueError("bad gateway"), retry_in=lease) is ItemState.PENDING
        after = await pool.get(item.id)
        assert after.available_at == pytest.approx(now + lease, abs=0.1)
        assert after.claimed_by is None and after.lease_expires_at is None
        assert await pool.claim("w1") is None
        stats = await pool.stats()
        assert (stats.delayed, stats.claimed) == (1, 0)
        await self.elapse(clock, lease * 1.5)
        again = await self.must_claim(pool)
        assert again.id == item.id and again.attempts == 2 and again.error == "ValueError: bad gateway"

    @pytest.mark.asyncio
    async def test_fail_with_poison_dead_letters_at_once(self, hive: Hive) -> None:
        pool = hive.pool("jobs")
        await pool.push("x", max_attempts=10)
        item = await self.must_claim(pool)
        assert await pool.fail(item, "never works", poison=True) is ItemState.POISONED
        assert (await pool.get(item.id)).state is ItemState.POISONED
        with pytest.raises(LeaseLost, match="poisoned"):
            await pool.complete(item)

    @pytest.mark.asyncio
    async def test_dead_listing_and_requeue(self, hive: Hive) -> None:
        pool = hive.pool("jobs")
        ids = await pool.push_many(["a", "b", "c", "d"])
        for _ in ids:
            await pool.fail(await self.must_claim(pool), "dead", poison=True)
        dead = await pool.dead()
        assert [i.id for i in dead] == ids
        assert all(i.state is ItemState.POISONED and i.error == "dead" for i in dead)
        assert [i.id for i in await pool.dead(limit=2, offset=1)] == ids[1:3]
        assert await pool.requeue([ids[1], "no-such-id", ids[1]]) == 1
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
    async def test_items_lists_by_state_oldest_first(self, hive: Hive) -> None:
        pool = hive.pool("jobs")
        ids = await pool.push_many(["a", "b", "c"])
        claimed = await self.must_claim(pool)
        assert [i.id for i in await pool.items("pending")] == ids[1:]
        assert [i.id for i in await pool.items(ItemState.CLAIMED)] == [claimed.id]
        assert await pool.items("done") == []
        with pytest.raises(InvalidArgument, match="unknown item state"):
            await pool.items("finished")

    @pytest.mark.asyncio
    async def test_release_refunds_the_attempt(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
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
    async def test_release_by_worker_spends_or_refunds(self, hive: Hive) -> None:
        pool = hive.pool("jobs")
        await pool.push_many([Job("one-shot", max_attempts=1), "a", "b"])
        mine = await pool.claim_many(2, "w1")
        theirs = await self.must_claim(pool, "w2")
        assert await pool.release_by_worker("w1", spend_attempt=True) == 2
        poisoned = await pool.get(mine[0].id)
        assert poisoned.state is ItemState.POISONED and poisoned.attempts == 1
        spent = await pool.get(mine[1].id)
        assert spent.state is ItemState.PENDING and spent.attempts == 1 and spent.claimed_by is None
        assert (await pool.get(theirs.id)).state is ItemState.CLAIMED
        assert await pool.release_by_worker("w1") == 0
        assert await pool.release_by_worker("w2", spend_attempt=False) == 1
        refunded = await pool.get(theirs.id)
        assert refunded.state is ItemState.PENDING and refunded.attempts == 0
        for stale in (*mine, theirs):
            with pytest.raises(LeaseLost):
                await pool.complete(stale)

    @pytest.mark.asyncio
    async def test_release_by_worker_across_pools(self, hive: Hive) -> None:
        a, b = hive.pool("a"), hive.pool("b")
        await a.push(1)
        await b.push(2)
        await self.must_claim(a, "w1")
        await self.must_claim(b, "w1")
        assert await hive.storage.release_by_worker(None, "w1", False) == 2
        assert (await a.stats()).pending == 1 and (await b.stats()).pending == 1

    @pytest.mark.asyncio
    async def test_purge_deletes_old_finished_items(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
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
    async def test_stats_size_and_pools(self, hive: Hive, clock: ManualClock | None) -> None:
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
        pool = hive.pool("jobs")
        first = await pool.get(await pool.push("a"))
        await self.elapse(clock, 0.05)
        await pool.push("b")
        assert (await pool.stats()).oldest_pending_at == first.available_at

    # ======================================================================
    # workers
    # ======================================================================
    @pytest.mark.asyncio
    async def test_register_get_list_and_status(self, hive: Hive, clock: ManualClock | None) -> None:
        workers = hive.workers
        now = await hive.now()
        one = await workers.register(worker_id="w1", host="h1", pid=11, pools=["a"], capabilities=["llm"])
        assert (one.worker_id, one.host, one.pid, one.pools, one.capabilities) == ("w1", "h1", 11, ("a",), ("llm",))
        assert one.status is WorkerStatus.STARTING
        assert one.registered_at == one.last_heartbeat >= now
        await self.elapse(clock, 0.05)
        await workers.register(worker_id="w2", host="h2", pid=12, pools=["a", "b"])
        await workers.update_status("w1", WorkerStatus.BUSY, "item 42")
        await workers.update_status("w2", "idle")
        got = await workers.get("w1")
        assert got.status is WorkerStatus.BUSY and got.detail == "item 42"
        assert [w.worker_id for w in await workers.list()] == ["w1", "w2"]
        assert [w.worker_id for w in await workers.list(host="h2")] == ["w2"]
        assert [w.worker_id for w in await workers.list(pool="b")] == ["w2"]
        assert [w.worker_id for w in await workers.list(statuses={WorkerStatus.BUSY})] == ["w1"]
        assert await workers.list(statuses={WorkerStatus.LOST}) == []
        with pytest.raises(WorkerNotFound):
            await workers.get("nobody")
        with pytest.raises(WorkerNotFound):
            await workers.heartbeat("nobody")

    @pytest.mark.asyncio
    async def test_list_workers_stale_for(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        await hive.workers.register(worker_id="quiet")
        await self.elapse(clock, lease * 1.5)
        await hive.workers.register(worker_id="fresh")
        assert [w.worker_id for w in await hive.workers.list(stale_for=lease)] == ["quiet"]

    @pytest.mark.asyncio
    async def test_reregister_resets_the_record(self, hive: Hive) -> None:
        await hive.workers.register(worker_id="w1", pools=["a"])
        await hive.workers.update_status("w1", "busy")
        again = await hive.workers.register(worker_id="w1", pools=["b"])
        assert again.status is WorkerStatus.STARTING and again.pools == ("b",)
        assert len(await hive.workers.list()) == 1

    @pytest.mark.asyncio
    async def test_heartbeat_extends_the_workers_leases_in_every_pool(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        a, b = hive.pool("a"), hive.pool("b")
        await hive.workers.register(worker_id="w1")
        await hive.workers.register(worker_id="w2")
        await a.push(1)
        await b.push(2)
        await a.push(3)
        mine_a = await self.must_claim(a, "w1", lease=lease)
        mine_b = await self.must_claim(b, "w1", lease=lease)
        other = await self.must_claim(a, "w2", lease=lease)
        await self.elapse(clock, lease * 0.75)
        record = await hive.workers.heartbeat("w1")
        now = await hive.now()
        assert record.last_heartbeat == pytest.approx(now, abs=0.1)
        for item, pool in ((mine_a, "a"), (mine_b, "b")):
            raw = await self.raw(hive, pool, item.id)
            assert raw.lease_expires_at == pytest.approx(now + lease, abs=0.1)
            assert raw.token == item.token
        await self.elapse(clock, lease * 0.5)  # past the original leases
        assert await a.claim("w3") is not None  # w2's item expired: nobody beat for it
        assert await a.claim("w3") is None and await b.claim("w3") is None
        await a.complete(mine_a)
        await b.complete(mine_b)
        with pytest.raises(LeaseLost):
            await a.complete(other)

    @pytest.mark.asyncio
    async def test_reap_releases_a_lost_workers_items_in_every_pool(
        self, clock: ManualClock | None, tmp_path: pathlib.Path, lease: float
    ) -> None:
        recorder = _LostRecorder()
        manager = PluginManager(entry_points=False, extra=[("lost-recorder", recorder)])
        async with Hive(self.make_backend(clock, tmp_path), manager=manager) as hive:
            a, b = hive.pool("a"), hive.pool("b")
            await hive.workers.register(worker_id="dead")
            await hive.workers.register(worker_id="alive")
            await a.push_many([Job("spent", max_attempts=1), "retry"])
            await b.push("elsewhere")
            spent, retry = await a.claim_many(2, "dead", lease=lease * 100)
            elsewhere = await self.must_claim(b, "dead", lease=lease * 100)
            await b.push("alive's")
            alives = await self.must_claim(b, "alive", lease=lease * 100)
            assert await hive.workers.reap(threshold=lease) == []
            assert recorder.lost == []
            await self.elapse(clock, lease * 1.5)
            await hive.workers.heartbeat("alive")
            before = await hive.workers.get("dead")
            reaped = await hive.workers.reap(threshold=lease)
            assert reaped == [ReapedWorker("dead", before.last_heartbeat, released=2, poisoned=1)]
            assert recorder.lost == reaped
            assert (await hive.workers.get("dead")).status is WorkerStatus.LOST
            assert (await hive.workers.get("alive")).status is not WorkerStatus.LOST
            assert (await a.get(spent.id)).state is ItemState.POISONED
            for item, pool in ((retry, a), (elsewhere, b)):
                after = await pool.get(item.id)
                assert after.state is ItemState.PENDING and after.attempts == 1 and after.claimed_by is None
            assert (await b.get(alives.id)).state is ItemState.CLAIMED
            with pytest.raises(WorkerLost):
                await hive.workers.heartbeat("dead")
            with pytest.raises(LeaseLost):
                await a.complete(retry)
            assert await hive.workers.reap(threshold=lease) == []  # lost workers are not reaped twice
            assert len(recorder.lost) == 1

    @pytest.mark.asyncio
    async def test_deregister_refunds_and_stops(self, hive: Hive) -> None:
        pool = hive.pool("jobs")
        await hive.workers.register(worker_id="w1")
        await pool.push("x")
        item = await self.must_claim(pool, "w1")
        assert await hive.workers.deregister("w1") == 1
        after = await pool.get(item.id)
        assert after.state is ItemState.PENDING and after.attempts == 0
        assert (await hive.workers.get("w1")).status is WorkerStatus.STOPPED
        assert await hive.workers.reap(threshold=0.001) == []

    # ======================================================================
    # shared state and waiting
    # ======================================================================
    @pytest.mark.asyncio
    async def test_shared_state_put_get_scan_delete(self, hive: Hive) -> None:
        cooldowns = hive.shared("cooldowns")
        other = hive.shared("other")
        await cooldowns.put("key-1", {"until": 12.5})
        await cooldowns.put("key-2", [1, "two"])
        await other.put("key-1", "elsewhere")
        assert await cooldowns.get("key-1") == {"until": 12.5}
        assert await cooldowns.get("missing", "dflt") == "dflt"
        assert await cooldowns.items() == {"key-1": {"until": 12.5}, "key-2": [1, "two"]}
        await cooldowns.put("key-1", "replaced")
        assert await cooldowns.get("key-1") == "replaced"
        assert await cooldowns.delete("key-1") is True
        assert await cooldowns.delete("key-1") is False
        assert await cooldowns.items() == {"key-2": [1, "two"]}
        assert await other.get("key-1") == "elsewhere"

    @pytest.mark.asyncio
    async def test_shared_state_expires(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        area = hive.shared("cooldowns")
        await area.put("short", 1, ttl=lease)
        await area.put("long", 2, ttl=lease * 100)
        await area.put("forever", 3)
        assert await area.get("short") == 1
        await self.elapse(clock, lease * 1.5)
        assert await area.get("short") is None
        assert await area.items() == {"long": 2, "forever": 3}
        assert await area.delete("short") is False

    @pytest.mark.asyncio
    async def test_wait_for_work_returns_within_its_timeout(self, hive: Hive) -> None:
        await asyncio.wait_for(hive.pool("idle").wait_for_work(0.05), timeout=10)
        await asyncio.wait_for(hive.pool("idle").wait_for_work(0), timeout=10)

    @pytest.mark.asyncio
    async def test_wait_for_work_wakes_on_push(self, hive: Hive) -> None:
        if "notify" not in hive.storage.capabilities:
            pytest.skip("backend does not declare the 'notify' capability")
        pool = hive.pool("jobs")
        waiter = asyncio.ensure_future(pool.wait_for_work(60))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        await pool.push("wake up")
        await asyncio.wait_for(waiter, timeout=10)

    # ======================================================================
    # bad input: a specific error, and nothing stored
    # ======================================================================
    async def _snapshot(self, hive: Hive) -> tuple[Any, ...]:
        pools = await hive.pools()
        return (pools, [await hive.storage.stats(p) for p in pools])

    @pytest.mark.asyncio
    @pytest.mark.parametrize(
        "payload",
        [math.nan, math.inf, {1, 2}, object(), b"bytes", {"nested": [float("nan")]}, {"k": object()}],
        ids=["nan", "inf", "set", "object", "bytes", "nested-nan", "nested-object"],
    )
    async def test_non_json_payload_is_refused(self, hive: Hive, payload: Any) -> None:
        pool = hive.pool("jobs")
        await pool.push("existing")
        before = await self._snapshot(hive)
        with pytest.raises(InvalidItem, match="JSON"):
            await pool.push(payload)
        with pytest.raises(InvalidItem):
            await pool.push_many(["fine", payload])
        with pytest.raises(InvalidItem):
            await pool.push_many([Job("fine"), Job(payload)])
        assert await self._snapshot(hive) == before

    @pytest.mark.asyncio
    async def test_non_json_result_is_refused_and_the_claim_kept(self, hive: Hive) -> None:
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        with pytest.raises(InvalidItem):
            await pool.complete(item, {"bad": {1, 2}})
        assert (await pool.get(item.id)).state is ItemState.CLAIMED
        await pool.complete(item, "ok")

    @pytest.mark.asyncio
    @pytest.mark.parametrize(
        ("option", "value"),
        [
            ("priority", -1),
            ("priority", 1.5),
            ("priority", math.nan),
            ("delay", -1.0),
            ("delay", math.nan),
            ("delay", math.inf),
            ("max_attempts", 0),
            ("max_attempts", -3),
            ("dedup_key", ""),
            ("dedup_key", 42),
        ],
    )
    async def test_bad_push_options_are_refused(self, hive: Hive, option: str, value: Any) -> None:
        pool = hive.pool("jobs")
        await pool.push("existing")
        before = await self._snapshot(hive)
        with pytest.raises(InvalidArgument, match=option):
            await pool.push("x", **{option: value})
        with pytest.raises(InvalidArgument, match=option):
            await pool.push_many(["ok", Job("x", **{option: value})])
        assert await self._snapshot(hive) == before

    @pytest.mark.asyncio
    @pytest.mark.parametrize("lease", [0, -1.0, math.nan, math.inf])
    async def test_bad_lease_is_refused(self, hive: Hive, lease: float) -> None:
        pool = hive.pool("jobs")
        await pool.push("x")
        before = await self._snapshot(hive)
        with pytest.raises(InvalidArgument, match="lease"):
            await pool.claim("w1", lease=lease)
        with pytest.raises(InvalidArgument, match="lease"):
            await pool.claim_many(2, "w1", lease=lease)
        assert await self._snapshot(hive) == before
        item = await self.must_claim(pool)
        with pytest.raises(InvalidArgument, match="lease"):
            await pool.extend(item, lease)
        assert await self.raw(hive, "jobs", item.id) == item

    @pytest.mark.asyncio
    @pytest.mark.parametrize("n", [0, -1, 10_001, 1.0])
    async def test_bad_claim_count_is_refused(self, hive: Hive, n: Any) -> None:
        pool = hive.pool("jobs")
        await pool.push("x")
        before = await self._snapshot(hive)
        with pytest.raises(InvalidArgument, match="n must be"):
            await pool.claim_many(n, "w1")
        assert await self._snapshot(hive) == before

    @pytest.mark.asyncio
    async def test_bad_fail_and_release_arguments_change_nothing(self, hive: Hive) -> None:
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        for bad in (-1.0, math.nan, math.inf):
            with pytest.raises(InvalidArgument, match="retry_in"):
                await pool.fail(item, "x", retry_in=bad)
            with pytest.raises(InvalidArgument, match="delay"):
                await pool.release(item, delay=bad)
        assert await self.raw(hive, "jobs", item.id) == item
        with pytest.raises(InvalidArgument, match="older_than"):
            await pool.purge(-1)

    @pytest.mark.asyncio
    @pytest.mark.parametrize("name", ["", " jobs", "has space", "-dash-first", "a/b", "x" * 201, 42, None])
    async def test_bad_pool_names_are_refused(self, hive: Hive, name: Any) -> None:
        with pytest.raises(InvalidName):
            hive.pool(name)
        assert await hive.pools() == []

    @pytest.mark.asyncio
    async def test_bad_worker_names_and_thresholds_are_refused(self, hive: Hive) -> None:
        with pytest.raises(InvalidName):
            await hive.workers.register(worker_id="bad name")
        with pytest.raises(InvalidName):
            await hive.workers.register(worker_id="w1", pools=["ok", "not ok"])
        assert await hive.workers.list() == []
        with pytest.raises(InvalidArgument):
            await hive.workers.reap(threshold=-5)
        with pytest.raises(ValueError):
            await hive.workers.update_status("w1", "sleepy")

    @pytest.mark.asyncio
    async def test_bad_shared_state_input_is_refused(self, hive: Hive) -> None:
        with pytest.raises(InvalidName):
            hive.shared("bad namespace")
        area = hive.shared("ok")
        with pytest.raises(InvalidItem):
            await area.put("k", {1, 2})
        with pytest.raises(InvalidArgument, match="ttl"):
            await area.put("k", 1, ttl=0)
        assert await area.items() == {}
