"""Every protocol method, run the same way on flatmachines' own backends and on the adapter.

What holds for all four implementations is asserted once; where the adapter
differs on purpose, test_differences.py says so on both sides.
"""

from __future__ import annotations

import asyncio
import time

import flatmachines
import pytest
from flatmachines.distributed import WorkerFilter, WorkerRegistration

from conftest import Backends

pytestmark = pytest.mark.asyncio


async def wait_for(predicate, what: str, deadline: float = 60.0):  # type: ignore[no-untyped-def]
    """Poll an async predicate until it returns something truthy (generous deadline, no fixed sleep)."""
    end = time.monotonic() + deadline
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class TestWork:
    async def test_satisfies_the_runtime_checkable_protocols(self, backends: Backends) -> None:
        assert isinstance(backends.work, flatmachines.WorkBackend)
        assert isinstance(backends.work.pool("jobs"), flatmachines.WorkPool)
        assert backends.work.pool("jobs") is backends.work.pool("jobs")

    async def test_push_returns_an_id_and_claim_hands_out_the_item(self, backends: Backends) -> None:
        pool = backends.work.pool("jobs")
        item_id = await pool.push({"task": "hello"})
        assert isinstance(item_id, str) and item_id
        claimed = await pool.claim("worker-1")
        assert claimed is not None
        assert claimed.data == {"task": "hello"}
        assert (claimed.claimed_by, claimed.attempts, claimed.status, claimed.max_retries) == (
            "worker-1",
            1,
            "claimed",
            3,
        )
        assert claimed.claimed_at is not None and claimed.created_at

    async def test_claim_on_an_empty_pool_is_none(self, backends: Backends) -> None:
        assert await backends.work.pool("jobs").claim("worker-1") is None

    async def test_claims_come_in_push_order(self, backends: Backends) -> None:
        pool = backends.work.pool("jobs")
        for n in range(3):
            await pool.push({"n": n})
        got = [(await pool.claim("w")).data["n"] for _ in range(3)]  # type: ignore[union-attr]
        assert got == [0, 1, 2]

    async def test_complete_takes_the_item_out_of_the_pool(self, backends: Backends) -> None:
        pool = backends.work.pool("jobs")
        await pool.push({"task": "hello"})
        claimed = await pool.claim("worker-1")
        await pool.complete(claimed.id, {"answer": 42})
        assert await pool.size() == 0
        assert await pool.claim("worker-2") is None

    async def test_fail_returns_the_item_for_another_attempt(self, backends: Backends) -> None:
        pool = backends.work.pool("jobs")
        await pool.push({"task": "hello"}, {"max_retries": 3})
        claimed = await pool.claim("worker-1")
        await pool.fail(claimed.id, "oops")
        assert await pool.size() == 1
        again = await pool.claim("worker-2")
        assert again is not None and again.attempts == 2 and again.data == {"task": "hello"}

    async def test_fail_without_an_error_message(self, backends: Backends) -> None:
        pool = backends.work.pool("jobs")
        await pool.push({"task": "hello"})
        await pool.fail((await pool.claim("w")).id)  # type: ignore[union-attr]
        assert await pool.size() == 1

    async def test_fail_poisons_once_max_retries_attempts_are_spent(self, backends: Backends) -> None:
        pool = backends.work.pool("jobs")
        await pool.push({"task": "hello"}, {"max_retries": 2})
        await pool.fail((await pool.claim("w")).id, "one")  # type: ignore[union-attr]
        await pool.fail((await pool.claim("w")).id, "two")  # type: ignore[union-attr]
        assert await pool.size() == 0
        assert await pool.claim("w") is None

    async def test_size_counts_waiting_items_only(self, backends: Backends) -> None:
        pool = backends.work.pool("jobs")
        await pool.push({"a": 1})
        await pool.push({"b": 2})
        assert await pool.size() == 2
        await pool.claim("worker-1")
        assert await pool.size() == 1

    async def test_release_by_worker_gives_back_that_workers_items(self, backends: Backends) -> None:
        pool = backends.work.pool("jobs")
        for n in range(3):
            await pool.push({"n": n})
        await pool.claim("worker-1")
        await pool.claim("worker-1")
        await pool.claim("worker-2")
        assert await pool.release_by_worker("worker-1") == 2
        assert await pool.size() == 2
        assert await pool.release_by_worker("nobody") == 0

    async def test_pools_are_separate(self, backends: Backends) -> None:
        alpha, beta = backends.work.pool("alpha"), backends.work.pool("beta")
        await alpha.push({"in": "alpha"})
        assert (await alpha.size(), await beta.size()) == (1, 0)
        assert await beta.claim("w") is None
        assert await beta.release_by_worker("w") == 0

    async def test_unknown_ids_are_key_errors(self, backends: Backends) -> None:
        pool = backends.work.pool("jobs")
        await pool.push({"a": 1})
        for call in (pool.complete, pool.fail):
            with pytest.raises(KeyError, match="not found"):
                await call("3f2b6c1e-0000-4000-8000-000000000000")
        assert await pool.size() == 1


class TestRegistration:
    async def test_satisfies_the_runtime_checkable_protocol(self, backends: Backends) -> None:
        assert isinstance(backends.registry, flatmachines.RegistrationBackend)

    async def test_register_returns_an_active_record(self, backends: Backends) -> None:
        reg = WorkerRegistration(worker_id="w1", host="box", pid=123, capabilities=["gpu"])
        record = await backends.registry.register(reg)
        assert (record.worker_id, record.status, record.host, record.pid, record.capabilities) == (
            "w1",
            "active",
            "box",
            123,
            ["gpu"],
        )
        assert record.started_at == reg.started_at and record.last_heartbeat

    async def test_get_returns_the_record_or_none(self, backends: Backends) -> None:
        await backends.registry.register(WorkerRegistration(worker_id="w1", host="box", pid=7))
        got = await backends.registry.get("w1")
        assert got is not None and (got.worker_id, got.status, got.host, got.pid) == ("w1", "active", "box", 7)
        assert await backends.registry.get("nobody") is None

    async def test_host_pid_capabilities_and_started_at_are_optional(self, backends: Backends) -> None:
        await backends.registry.register(WorkerRegistration(worker_id="w1", started_at=None))  # type: ignore[arg-type]
        got = await backends.registry.get("w1")
        assert got is not None
        assert (got.host, got.pid, got.capabilities, got.current_task_id, got.metadata) == (None,) * 5

    async def test_heartbeat_merges_metadata(self, backends: Backends) -> None:
        await backends.registry.register(WorkerRegistration(worker_id="w1"))
        await backends.registry.heartbeat("w1", {"load": 0.5, "jobs": 1})
        await backends.registry.heartbeat("w1", {"jobs": 2})
        await backends.registry.heartbeat("w1")
        got = await backends.registry.get("w1")
        assert got is not None and got.metadata == {"load": 0.5, "jobs": 2}

    async def test_registering_again_clears_metadata(self, backends: Backends) -> None:
        await backends.registry.register(WorkerRegistration(worker_id="w1"))
        await backends.registry.heartbeat("w1", {"load": 0.5})
        await backends.registry.register(WorkerRegistration(worker_id="w1"))
        got = await backends.registry.get("w1")
        assert got is not None and got.metadata is None and got.status == "active"

    async def test_heartbeat_and_status_of_an_unknown_worker_are_key_errors(self, backends: Backends) -> None:
        with pytest.raises(KeyError, match="nobody"):
            await backends.registry.heartbeat("nobody")
        with pytest.raises(KeyError, match="nobody"):
            await backends.registry.heartbeat("nobody", {"x": 1})
        with pytest.raises(KeyError, match="nobody"):
            await backends.registry.update_status("nobody", "terminated")
        assert await backends.registry.list() == []

    @pytest.mark.parametrize("status", ["active", "terminating", "terminated", "lost"])
    async def test_every_flatmachines_status_reads_back(self, backends: Backends, status: str) -> None:
        await backends.registry.register(WorkerRegistration(worker_id="w1"))
        await backends.registry.update_status("w1", status)
        got = await backends.registry.get("w1")
        assert got is not None and got.status == status
        assert [w.worker_id for w in await backends.registry.list(WorkerFilter(status=status))] == ["w1"]

    async def test_list_filters_by_status_and_capability(self, backends: Backends) -> None:
        await backends.registry.register(WorkerRegistration(worker_id="gpu-1", capabilities=["gpu", "llm"]))
        await backends.registry.register(WorkerRegistration(worker_id="cpu-1", capabilities=["cpu"]))
        await backends.registry.register(WorkerRegistration(worker_id="gone", capabilities=["gpu"]))
        await backends.registry.update_status("gone", "terminated")
        everyone = {w.worker_id for w in await backends.registry.list()}
        assert everyone == {"gpu-1", "cpu-1", "gone"}
        active = {w.worker_id for w in await backends.registry.list(WorkerFilter(status="active"))}
        assert active == {"gpu-1", "cpu-1"}
        gpu = {w.worker_id for w in await backends.registry.list(WorkerFilter(capability="gpu"))}
        assert gpu == {"gpu-1", "gone"}
        both = await backends.registry.list(WorkerFilter(status="active", capability="gpu"))
        assert [w.worker_id for w in both] == ["gpu-1"]

    async def test_stale_filter_lists_workers_whose_heartbeat_is_old(self, backends: Backends) -> None:
        await backends.registry.register(WorkerRegistration(worker_id="w1"))
        assert await backends.registry.list(WorkerFilter(stale_threshold_seconds=3600)) == []

        async def stale() -> list[str]:
            return [w.worker_id for w in await backends.registry.list(WorkerFilter(stale_threshold_seconds=1))]

        assert await wait_for(stale, "w1 to turn stale") == ["w1"]
        before = (await backends.registry.get("w1")).last_heartbeat  # type: ignore[union-attr]
        await backends.registry.heartbeat("w1")
        assert (await backends.registry.get("w1")).last_heartbeat > before  # type: ignore[union-attr]
