"""Workers: rules W1-W6, R1-R2 of the storage contract.

Registration, heartbeats, reaping, and releasing what a worker holds.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import pathlib

import pytest

from workhive.errors import LeaseLost, WorkerLost, WorkerNotFound
from workhive.hive import Hive
from workhive.hookspecs import hookimpl
from workhive.models import ItemState, Job, ReapedWorker, WorkerStatus
from workhive.plugin_manager import PluginManager
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class _LostRecorder:
    """An in-code plugin that records ``workhive_worker_lost`` events."""

    def __init__(self) -> None:
        self.lost: list[ReapedWorker] = []

    @hookimpl
    def workhive_worker_lost(self, worker: ReapedWorker) -> None:
        self.lost.append(worker)


class WorkerRules(ContractBase):
    """Rules W1-W6, R1-R2: registration, heartbeats, reaping, and releasing what a worker holds."""

    @pytest.mark.asyncio
    async def test_register_get_list_and_status(self, hive: Hive, clock: ManualClock | None) -> None:
        """[L2][W1][W2] register makes a STARTING record at now; get, list and status updates read it back.

        List filters by host, pool and status; an unknown worker raises ``WorkerNotFound``.
        """
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
    async def test_reregister_resets_the_record(self, hive: Hive) -> None:
        """[W1] registering an existing worker replaces its record: STARTING again, with the new pools."""
        await hive.workers.register(worker_id="w1", pools=["a"])
        await hive.workers.update_status("w1", "busy")
        again = await hive.workers.register(worker_id="w1", pools=["b"])
        assert again.status is WorkerStatus.STARTING and again.pools == ("b",)
        assert len(await hive.workers.list()) == 1

    @pytest.mark.asyncio
    async def test_list_workers_stale_for(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[W6] ``stale_for`` lists the workers whose last heartbeat is at least that old."""
        await hive.workers.register(worker_id="quiet")
        await self.elapse(clock, lease * 1.5)
        await hive.workers.register(worker_id="fresh")
        assert [w.worker_id for w in await hive.workers.list(stale_for=lease)] == ["quiet"]

    @pytest.mark.asyncio
    async def test_heartbeat_extends_the_workers_leases_in_every_pool(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[W3] a heartbeat renews the worker's leases in every pool by their ``lease_seconds``.

        Another worker's leases are not renewed.
        """
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
    async def test_set_worker_status_of_an_unknown_worker_raises(self, hive: Hive) -> None:
        """[W4] WorkerNotFound, and nothing is registered by it."""
        with pytest.raises(WorkerNotFound):
            await hive.workers.update_status("nobody", WorkerStatus.BUSY, "x")
        assert await hive.storage.get_worker("nobody") is None

    @pytest.mark.asyncio
    async def test_reap_releases_a_lost_workers_items_in_every_pool(
        self, clock: ManualClock | None, tmp_path: pathlib.Path, lease: float
    ) -> None:
        """[W5] reap marks a silent worker LOST and releases its claims in every pool.

        The attempt is spent (a spent item is poisoned); the ``workhive_worker_lost`` hook hears it once.
        """
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
    async def test_deregister_refunds_and_stops(self, hive: Hive) -> None:
        """[R1][W5] deregister refunds the worker's claims and marks it STOPPED, which reap then skips."""
        pool = hive.pool("jobs")
        await hive.workers.register(worker_id="w1")
        await pool.push("x")
        item = await self.must_claim(pool, "w1")
        assert await hive.workers.deregister("w1") == 1
        after = await pool.get(item.id)
        assert after.state is ItemState.PENDING and after.attempts == 0
        assert (await hive.workers.get("w1")).status is WorkerStatus.STOPPED
        assert await hive.workers.reap(threshold=0.001) == []

    @pytest.mark.asyncio
    async def test_release_by_worker_spends_or_refunds(self, hive: Hive) -> None:
        """[R1] with ``spend_attempt`` the attempt is kept (spent items poisoned), else refunded.

        Other workers' claims stay.
        """
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
        """[R1] with no pool, release_by_worker releases the worker's claims in every pool."""
        a, b = hive.pool("a"), hive.pool("b")
        await a.push(1)
        await b.push(2)
        await self.must_claim(a, "w1")
        await self.must_claim(b, "w1")
        assert await hive.storage.release_by_worker(None, "w1", False) == 2
        assert (await a.stats()).pending == 1 and (await b.stats()).pending == 1

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
