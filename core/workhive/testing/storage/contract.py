"""The storage contract suite: the definition of a workhive storage backend.

Subclass ``StorageContract`` in your backend's tests and override
``make_backend``; every ``test_*`` method here then runs against your backend
through the public ``Hive``/``Pool``/``Workers`` facade, reading raw state
through the backend (``get``, ``list_items``, ``stats``) as ground truth::

    from workhive.testing import StorageContract

    class TestMyBackend(StorageContract):
        def make_backend(self, clock, tmp_path):
            return MyBackend(f"mystore:///{tmp_path}/db", clock=clock)

Hooks: ``make_backend`` (always), ``make_missing_backend`` (the same store
with ``create=False``) and, for a backend declaring ``"multiprocess"``,
``multiprocess_store`` (the URL and options another process opens it by).

Capability flags (class attributes) switch optional parts:

* ``supports_manual_clock``: tests move time by hand through ``clock`` (pass
  it as ``clock=``, or as ``clock_offset=clock.offset`` on a server backend,
  which then also sets ``clock_drift``).
  A second subclass with it False runs the contract on the real clock:
  time-dependent tests then wait with short leases, exact-boundary tests skip.
* ``"notify"`` in ``backend.capabilities``: ``wait_for_work`` must wake on push.
* ``"multiprocess"``: several processes drain one pool (``multiprocess_store``).

The rules and the tests that check each are the table in ``workhive/storage.py``.
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
    HiveNotFound,
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
from workhive.ids import is_item_id
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
    real_time_lease: ClassVar[float] = 1.0
    #: 0 when the backend runs on the ManualClock itself (``clock=``). A server backend that takes
    #: ``clock_offset=clock.offset`` sets the most real seconds one test may take: its server's clock
    #: keeps running, so times are compared within this much and exact-boundary tests skip.
    clock_drift: ClassVar[float] = 0.0

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> StorageBackend:
        """Return an unopened backend; use ``clock`` as its clock when it is not None."""
        raise NotImplementedError("override make_backend() in your StorageContract subclass")

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> StorageBackend:
        """Return an unopened backend for the same store ``make_backend(clock, tmp_path)`` opens, with ``create=False``.

        The contract test calls it first on a place where no hive exists
        (opening must raise ``HiveNotFound`` and create nothing), then again
        once ``make_backend`` has created the hive (it must open that hive).
        """
        raise NotImplementedError(
            "override make_missing_backend() in your StorageContract subclass: the same store as make_backend(), "
            "built with create=False"
        )

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        """How another process opens one store: ``workhive.open(url, **options)`` (options must pickle).

        Only called when the backend declares ``"multiprocess"``; the store
        must be fresh and must live under ``tmp_path`` (or a private namespace
        of yours). The suite opens it in the test process and in each worker
        process (started with ``spawn``, so the plugin must be installed).
        """
        raise NotImplementedError(
            "the backend declares 'multiprocess': override multiprocess_store() to return the URL (and picklable "
            "factory options) by which another process opens the same store"
        )

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
    async def test_item_ids_have_the_documented_shape_and_are_unique_across_pools(self, hive: Hive) -> None:
        ids = await hive.pool("a").push_many(["x", "y"]) + await hive.pool("b").push_many(["z"])
        ids.append(await hive.pool("a").push("w", dedup_key="k"))
        for item_id in ids:
            assert is_item_id(item_id), f"item id {item_id!r} is not of the workhive.ids shape ('i' + 16 hex digits)"
        assert len(set(ids)) == len(ids), f"item ids repeat across pools: {ids}"
        assert await hive.pool("a").push("again", dedup_key="k") == ids[-1]
        assert await hive.storage.get("a", ids[0].upper()) is None, "a string of another shape is no item"

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
            assert self.same_time(item.lease_expires_at, now + 30.0)
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
            assert self.same_time(expiry, now + lease * 4)
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
    # rules a backend author could otherwise only reverse-engineer
    # (each test names its rule in storage.py's table: [P3], [L5], ...)
    # ======================================================================
    def needs_manual_clock(self, clock: ManualClock | None) -> ManualClock:
        """The clock, or skip: the test checks an exact boundary that a running clock cannot hit."""
        if clock is None or self.clock_drift:
            pytest.skip("checks an exact time boundary: needs a backend on the ManualClock itself")
        return clock

    def within(self, seen: float | None, earliest: float, latest: float) -> bool:
        """A backend time lies between two readings of the backend's clock taken around the operation
        that set it (shifted as the rule says; widened by ``clock_drift`` when the server's clock runs).

        Bracketing, not "equal to a reading taken afterwards within 0.1 s": on a loaded machine an
        await can take longer than any fixed tolerance, and the rule is about the time, not the speed.
        """
        slack = self.clock_drift or 1e-6
        return seen is not None and earliest - slack <= seen <= latest + slack

    def same_time(self, seen: float | None, want: float) -> bool:
        """A backend time equals an expected one (within ``clock_drift`` when the server's clock runs)."""
        return seen is not None and (seen == want if not self.clock_drift else abs(seen - want) <= self.clock_drift)

    @pytest.mark.asyncio
    async def test_claimed_items_equal_a_later_get_field_for_field(self, hive: Hive) -> None:
        """[C4] what claim returns is what was stored."""
        pool = hive.pool("jobs")
        await pool.push_many([Job("a", dedup_key="ka"), Job("b", priority=2), Job("c", max_attempts=2)])
        for item in await pool.claim_many(3, "w1", lease=25.0):
            assert await self.raw(hive, "jobs", item.id) == item

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
    async def test_a_heartbeaten_lease_still_expires_and_an_expired_one_is_not_renewed(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[W3] heartbeat renews live leases only, and a renewed lease still ends when the beats stop."""
        a = hive.pool("a")
        await hive.workers.register(worker_id="w1")
        await a.push_many(["kept", "dropped"])
        kept = await self.must_claim(a, "w1", lease=lease * 2)
        dropped = await self.must_claim(a, "w1", lease=lease)
        await self.elapse(clock, lease * 1.5)  # dropped has expired, kept has not
        await hive.workers.heartbeat("w1")
        assert (await self.must_claim(a, "w2", lease=lease * 100)).id == dropped.id
        assert await a.claim("w2") is None
        await self.elapse(clock, lease * 2.5)  # past the renewed lease: the worker stopped beating
        again = await self.must_claim(a, "w3")
        assert again.id == kept.id and again.attempts == 2

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

    @pytest.mark.asyncio
    async def test_release_by_worker_of_one_pool_leaves_the_others(self, hive: Hive) -> None:
        """[R1] release_by_worker(pool) touches that pool only."""
        a, b = hive.pool("a"), hive.pool("b")
        await a.push("1")
        await b.push("2")
        mine_a = await self.must_claim(a, "w1")
        mine_b = await self.must_claim(b, "w1")
        assert await a.release_by_worker("w1") == 1
        assert (await a.get(mine_a.id)).state is ItemState.PENDING
        assert await self.raw(hive, "b", mine_b.id) == mine_b
        await b.complete(mine_b)
        assert await b.release_by_worker("w1") == 0

    @pytest.mark.asyncio
    async def test_release_by_worker_counts_refunds_as_releases(self, hive: Hive) -> None:
        """[R2] a refunded claim counts in ``releases`` (as ``release`` does); a spent one does not."""
        pool = hive.pool("jobs")
        refunded_id, spent_id = await pool.push_many(["r", "s"])
        await self.must_claim(pool, "w1")
        assert await pool.release_by_worker("w1", spend_attempt=False) == 1
        refunded = await pool.get(refunded_id)
        assert (refunded.attempts, refunded.releases) == (0, 1)
        claimed = await pool.claim_many(2, "w2")
        assert sorted(i.id for i in claimed) == sorted([refunded_id, spent_id])
        assert await pool.release_by_worker("w2", spend_attempt=True) == 2
        assert ((await pool.get(refunded_id)).attempts, (await pool.get(refunded_id)).releases) == (1, 1)
        assert ((await pool.get(spent_id)).attempts, (await pool.get(spent_id)).releases) == (1, 0)

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
    async def test_reap_is_strictly_older_and_stale_for_is_at_least(
        self, hive: Hive, clock: ManualClock | None
    ) -> None:
        """[W5][W6] reap takes heartbeats older than the threshold (``>``); stale_for at least that old (``>=``)."""
        manual = self.needs_manual_clock(clock)
        await hive.workers.register(worker_id="w1")
        manual.advance(20.0)
        assert [w.worker_id for w in await hive.workers.list(stale_for=20.0)] == ["w1"]
        assert await hive.workers.reap(threshold=20.0) == []
        assert (await hive.workers.get("w1")).status is WorkerStatus.STARTING
        manual.advance(0.5)
        assert [r.worker_id for r in await hive.workers.reap(threshold=20.0)] == ["w1"]

    @pytest.mark.asyncio
    async def test_reap_skips_stopped_and_lost_workers_and_takes_every_other_status(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[W5] with time really passing: STOPPED and LOST are never reaped, every other status is."""
        live = [s for s in WorkerStatus if s not in (WorkerStatus.STOPPED, WorkerStatus.LOST)]
        for status in live:
            await hive.workers.register(worker_id=f"w-{status.value}")
            if status is not WorkerStatus.STARTING:
                await hive.workers.update_status(f"w-{status.value}", status)
        await hive.workers.register(worker_id="stopped")
        await hive.workers.deregister("stopped")
        await self.elapse(clock, lease * 1.5)
        reaped = await hive.workers.reap(threshold=lease)
        assert sorted(r.worker_id for r in reaped) == sorted(f"w-{s.value}" for s in live)
        assert (await hive.workers.get("stopped")).status is WorkerStatus.STOPPED
        await self.elapse(clock, lease * 1.5)
        assert await hive.workers.reap(threshold=lease) == []

    @pytest.mark.asyncio
    async def test_set_worker_status_of_an_unknown_worker_raises(self, hive: Hive) -> None:
        """[W4] WorkerNotFound, and nothing is registered by it."""
        with pytest.raises(WorkerNotFound):
            await hive.workers.update_status("nobody", WorkerStatus.BUSY, "x")
        assert await hive.storage.get_worker("nobody") is None

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
    async def test_create_false_opens_only_an_existing_hive(
        self, clock: ManualClock | None, tmp_path: pathlib.Path
    ) -> None:
        """[F1] ``create=False``: HiveNotFound where no hive is, creating nothing; the hive itself once it exists."""
        place = tmp_path / "store"
        place.mkdir()
        with pytest.raises(HiveNotFound):
            async with Hive(self.make_missing_backend(clock, place), manager=PluginManager(entry_points=False)):
                pass
        assert list(place.iterdir()) == [], "create=False left something behind"
        async with Hive(self.make_backend(clock, place), manager=PluginManager(entry_points=False)) as hive:
            assert await hive.pools() == []
            item_id = await hive.pool("jobs").push("kept")
            async with Hive(
                self.make_missing_backend(clock, place), manager=PluginManager(entry_points=False)
            ) as existing:
                assert (await existing.pool("jobs").get(item_id)).data == "kept"

    @pytest.mark.asyncio
    async def test_several_processes_drain_one_pool(self, clock: ManualClock | None, tmp_path: pathlib.Path) -> None:
        """[M1] "multiprocess": processes sharing a store through the public API never double-claim nor lose an item."""
        probe = self.make_backend(clock, tmp_path / "probe")
        if "multiprocess" not in probe.capabilities:
            pytest.skip("the backend does not declare the 'multiprocess' capability")
        from workhive.testing.multiprocess import drain_in_processes

        url, options = self.multiprocess_store(tmp_path)
        await drain_in_processes(url, options, tmp_path, processes=4, items=200)

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
        before = await hive.now()
        record = await hive.workers.heartbeat("w1")
        later = await hive.now()
        assert self.within(record.last_heartbeat, before, later)
        for item, pool in ((mine_a, "a"), (mine_b, "b")):
            raw = await self.raw(hive, pool, item.id)
            assert self.within(raw.lease_expires_at, before + lease, later + lease)
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
    async def test_shared_state_expires_exactly_at_its_ttl(self, hive: Hive, clock: ManualClock | None) -> None:
        """[K1] a key put with ``ttl`` reads as absent from ``now + ttl`` on (a moment before, it is there)."""
        manual = self.needs_manual_clock(clock)
        area = hive.shared("cooldowns")
        await area.put("k", 1, ttl=10.0)
        manual.advance(9.5)
        assert await area.get("k") == 1
        manual.advance(0.5)
        assert await area.get("k") is None
        assert await area.items() == {}

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

    @pytest.mark.asyncio
    async def test_wait_for_work_wakes_when_a_delayed_item_or_a_lease_comes_due(
        self, hive: Hive, clock: ManualClock | None
    ) -> None:
        """[N2] with "notify", no push is needed: a delayed item coming due or a lease expiring wakes the waiter."""
        if "notify" not in hive.storage.capabilities:
            pytest.skip("backend does not declare the 'notify' capability")
        pool = hive.pool("jobs")
        await pool.push("much later", delay=100_000)
        await pool.push("soon", delay=0.2)
        waiter = asyncio.ensure_future(pool.wait_for_work(3600))
        await asyncio.sleep(0)  # it is waiting now, with the item not yet due
        await self.elapse(clock, 0.3)
        await asyncio.wait_for(waiter, timeout=60)  # generous: only a waiter that sleeps out its hour fails
        item = await self.must_claim(pool, "w1", lease=0.2)
        assert item.data == "soon"
        waiter = asyncio.ensure_future(pool.wait_for_work(3600))
        await asyncio.sleep(0)
        await self.elapse(clock, 0.3)
        await asyncio.wait_for(waiter, timeout=60)
        assert (await self.must_claim(pool, "w2")).id == item.id

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
