"""The adapter's own behaviour: bad input, fencing across processes, lease renewal, closing."""

from __future__ import annotations

import asyncio
import time

import pytest
from flatmachines.distributed import WorkerFilter, WorkerRegistration

import workhive
from workhive_flatmachines import HiveHandle, WorkhiveRegistrationBackend, WorkhiveWorkBackend

pytestmark = pytest.mark.asyncio


async def wait_for(predicate, what: str, deadline: float = 60.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + deadline
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def snapshot(hive: workhive.Hive, pool: str) -> tuple[object, ...]:
    stats = await hive.pool(pool).stats()
    items = [await hive.pool(pool).items(s) for s in workhive.ItemState]
    return stats, [[(i.id, i.state, i.token, i.attempts) for i in group] for group in items]


class TestBadInput:
    @pytest.mark.parametrize(
        ("bad", "says"),
        [
            ("3f2b6c1e-0000-4000-8000-000000000000", "not an id this adapter issued"),
            ("i00000000000000ff.1", "no such item"),
            ("i00000000000000ff", "no such item"),
            ("", "not an id this adapter issued"),
        ],
    )
    async def test_ids_complete_and_fail_cannot_act_on_are_key_errors(
        self, handle: HiveHandle, bad: str, says: str
    ) -> None:
        pool = WorkhiveWorkBackend(handle).pool("jobs")
        await pool.push({"task": 1})
        claimed = await pool.claim("w1")
        hive = await handle.hive()
        before = await snapshot(hive, "jobs")
        for call in (pool.complete, pool.fail):
            with pytest.raises(KeyError, match=says) as info:
                await call(bad)
            assert repr(bad) in str(info.value) and "'jobs'" in str(info.value)
        assert await snapshot(hive, "jobs") == before
        await pool.complete(claimed.id)  # the real claim is untouched

    async def test_a_receipt_of_a_claim_never_made_is_refused(self, handle: HiveHandle) -> None:
        pool = WorkhiveWorkBackend(handle).pool("jobs")
        pushed = await pool.push({"task": 1})
        before = await snapshot(await handle.hive(), "jobs")
        for call in (pool.complete, pool.fail):
            with pytest.raises(KeyError, match=f"no claim of {pushed} ever had token 1"):
                await call(f"{pushed}.1")
        assert await snapshot(await handle.hive(), "jobs") == before
        claimed = await pool.claim("w1")
        with pytest.raises(KeyError, match="ever had token 2"):
            await pool.complete(f"{pushed}.2")
        await pool.complete(claimed.id)

    async def test_another_pools_receipt_is_unknown_here(self, handle: HiveHandle) -> None:
        work = WorkhiveWorkBackend(handle)
        await work.pool("a").push({"task": 1})
        claimed = await work.pool("a").claim("w")
        with pytest.raises(KeyError, match="no such item"):
            await work.pool("b").complete(claimed.id)
        await work.pool("a").complete(claimed.id)

    @pytest.mark.parametrize(
        ("options", "says"),
        [({"max_retries": -1}, "max_retries"), ({"max_retries": "3"}, "max_retries"), ({"delay": -1}, "delay")],
    )
    async def test_bad_push_options_store_nothing(self, handle: HiveHandle, options: dict, says: str) -> None:
        pool = WorkhiveWorkBackend(handle).pool("jobs")
        with pytest.raises(workhive.InvalidArgument, match=says):
            await pool.push({"task": 1}, options)
        assert await pool.size() == 0

    async def test_data_that_is_not_json_stores_nothing(self, handle: HiveHandle) -> None:
        pool = WorkhiveWorkBackend(handle).pool("jobs")
        with pytest.raises(workhive.InvalidItem):
            await pool.push({"when": object()})
        assert await pool.size() == 0

    async def test_metadata_that_is_not_json_changes_nothing(self, handle: HiveHandle) -> None:
        registry = WorkhiveRegistrationBackend(handle)
        await registry.register(WorkerRegistration(worker_id="w1"))
        before = await registry.get("w1")
        with pytest.raises(workhive.InvalidItem, match="worker metadata"):
            await registry.heartbeat("w1", {"when": object()})
        assert await registry.get("w1") == before

    async def test_unknown_filter_status_is_refused(self, handle: HiveHandle) -> None:
        with pytest.raises(workhive.InvalidArgument, match="'busy-ish'"):
            await WorkhiveRegistrationBackend(handle).list(WorkerFilter(status="busy-ish"))

    async def test_bad_registrations_store_nothing(self, handle: HiveHandle) -> None:
        registry = WorkhiveRegistrationBackend(handle)
        with pytest.raises(workhive.InvalidName):
            await registry.register(WorkerRegistration(worker_id="no spaces please"))
        with pytest.raises(workhive.InvalidArgument, match="capabilities"):
            await registry.register(WorkerRegistration(worker_id="w1", capabilities="gpu"))  # type: ignore[arg-type]
        with pytest.raises(workhive.InvalidArgument, match="pid"):
            await registry.register(WorkerRegistration(worker_id="w1", pid=-4))
        assert await registry.list() == []


class TestStatusMapping:
    async def test_workhive_status_names_read_as_flatmachines_ones(self, handle: HiveHandle) -> None:
        registry = WorkhiveRegistrationBackend(handle)
        await registry.register(WorkerRegistration(worker_id="w1"))
        pairs = [("busy", "active"), ("paused", "active"), ("stopping", "terminating"), ("stopped", "terminated")]
        for given, seen in pairs:
            await registry.update_status("w1", given)
            assert (await registry.get("w1")).status == seen  # type: ignore[union-attr]

    async def test_the_registry_is_workhives(self, handle: HiveHandle) -> None:
        registry = WorkhiveRegistrationBackend(handle)
        await registry.register(WorkerRegistration(worker_id="w1", capabilities=["gpu"]))
        await registry.update_status("w1", "terminating")
        record = await (await handle.hive()).workers.get("w1")
        assert (record.status, record.capabilities) == (workhive.WorkerStatus.STOPPING, ("gpu",))


class TestFencing:
    async def test_a_receipt_completes_from_another_adapter(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        url = f"sqlite:///{tmp_path / 'hive.db'}"
        first, second = WorkhiveWorkBackend(url), WorkhiveWorkBackend(url)
        try:
            await first.pool("jobs").push({"task": 1})
            claimed = await first.pool("jobs").claim("w1")
            # e.g. a machine resumed from its checkpoint in another process
            await second.pool("jobs").complete(claimed.id, {"ok": True})
            with pytest.raises(workhive.LeaseLost, match="completed already"):
                await first.pool("jobs").complete(claimed.id)
        finally:
            await first.aclose()
            await second.aclose()


class TestLeaseRenewal:
    async def test_a_claim_is_renewed_while_held_and_released_when_done(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        handle = HiveHandle(f"sqlite:///{tmp_path / 'hive.db'}", lease=30, heartbeat_every=0.05)
        try:
            work, registry = WorkhiveWorkBackend(handle), WorkhiveRegistrationBackend(handle)
            await registry.register(WorkerRegistration(worker_id="w1"))
            pool = work.pool("jobs")
            pushed = await pool.push({"task": 1})
            claimed = await pool.claim("w1")
            hive = await handle.hive()
            first_expiry = (await hive.pool("jobs").get(pushed)).lease_expires_at

            async def renewed() -> bool:
                return (await hive.pool("jobs").get(pushed)).lease_expires_at > first_expiry  # type: ignore[operator]

            await wait_for(renewed, "the lease to be renewed")
            keeper = await handle.keeper()
            assert keeper.holding("w1") == 1
            await pool.complete(claimed.id)
            assert keeper.holding("w1") == 0
        finally:
            await handle.aclose()

    async def test_an_unregistered_workers_claims_are_extended_one_by_one(self, handle: HiveHandle) -> None:
        handle.heartbeat_every = 0.05
        pool = WorkhiveWorkBackend(handle).pool("jobs")
        pushed = await pool.push({"task": 1})
        await pool.claim("never-registered")
        hive = await handle.hive()
        first_expiry = (await hive.pool("jobs").get(pushed)).lease_expires_at

        async def renewed() -> bool:
            return (await hive.pool("jobs").get(pushed)).lease_expires_at > first_expiry  # type: ignore[operator]

        await wait_for(renewed, "the lease to be extended")

    async def test_a_lost_worker_stops_renewing(self, handle: HiveHandle) -> None:
        handle.heartbeat_every = 0.05
        work, registry = WorkhiveWorkBackend(handle), WorkhiveRegistrationBackend(handle)
        await registry.register(WorkerRegistration(worker_id="w1"))
        await work.pool("jobs").push({"task": 1})
        await work.pool("jobs").claim("w1")
        keeper = await handle.keeper()
        await registry.update_status("w1", "lost")

        async def dropped() -> bool:
            return keeper.holding("w1") == 0

        await wait_for(dropped, "the keeper to drop the lost worker's claim")
