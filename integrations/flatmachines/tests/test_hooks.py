"""Every action of DistributedWorkerHooks through WorkhiveWorkerHooks, on each workhive backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from flatmachines import DistributedWorkerHooks

import workhive
from conftest import WORKHIVE_BACKENDS, storage_url
from workhive_flatmachines import WorkhiveWorkerHooks

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture(params=WORKHIVE_BACKENDS)
async def hooks(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[WorkhiveWorkerHooks]:
    h = WorkhiveWorkerHooks(storage=storage_url(request.param, tmp_path), lease=30)
    yield h
    await h.aclose()


async def test_it_is_a_distributed_worker_hooks(hooks: WorkhiveWorkerHooks) -> None:
    assert isinstance(hooks, DistributedWorkerHooks)


async def test_a_job_workers_actions(hooks: WorkhiveWorkerHooks) -> None:
    pushed = await hooks._work.pool("jobs").push({"doc": 1})
    ctx = await hooks.on_action("register_worker", {"pool_id": "jobs", "worker_id": "w1", "capabilities": ["pdf"]})
    assert ctx["status"] == "active" and ctx["registered_at"].startswith("20")
    state = await hooks.on_action("get_pool_state", {"pool_id": "jobs"})
    assert (state["queue_depth"], state["active_workers"]) == (1, 1)
    ctx = await hooks.on_action("claim_job", ctx)
    assert ctx["job"] == {"doc": 1} and ctx["job_id"] == pushed and ctx["workhive_claim"] == f"{pushed}.1"
    assert (await hooks._registration.get("w1")).current_task_id == ctx["job_id"]  # type: ignore[union-attr]
    await hooks.on_action("heartbeat", ctx)
    ctx["result"] = {"pages": 3}
    await hooks.on_action("complete_job", ctx)
    assert (await hooks._registration.get("w1")).current_task_id is None  # type: ignore[union-attr]
    await hooks.on_action("deregister_worker", ctx)
    hive = await hooks.handle.hive()
    assert "workhive_claim" not in ctx and ctx["job_id"] == pushed
    item = await hive.pool("jobs").get(pushed)
    assert (item.state, item.result) == (workhive.ItemState.DONE, {"pages": 3})
    assert (await hooks._registration.get("w1")).status == "terminated"  # type: ignore[union-attr]
    nothing = await hooks.on_action("claim_job", {"pool_id": "jobs", "worker_id": "w1"})
    assert (nothing["job"], nothing["job_id"]) == (None, None)


async def test_fail_job_retries_then_poisons(hooks: WorkhiveWorkerHooks) -> None:
    await hooks._work.pool("jobs").push({"doc": 1}, {"max_retries": 2})
    await hooks.on_action("register_worker", {"worker_id": "w1"})
    for _ in range(2):
        ctx = await hooks.on_action("claim_job", {"pool_id": "jobs", "worker_id": "w1"})
        await hooks.on_action("fail_job", {**ctx, "error": "parser crashed"})
        assert (await hooks._registration.get("w1")).current_task_id is None  # type: ignore[union-attr]
    dead = await (await hooks.handle.hive()).pool("jobs").dead()
    assert [(d.data, d.error) for d in dead] == [({"doc": 1}, "parser crashed")]


async def test_the_reaper_actions(hooks: WorkhiveWorkerHooks) -> None:
    await hooks._work.pool("jobs").push({"doc": 1})
    await hooks.on_action("register_worker", {"worker_id": "w1"})
    await hooks.on_action("claim_job", {"pool_id": "jobs", "worker_id": "w1"})
    fresh = await hooks.on_action("list_stale_workers", {"stale_threshold_seconds": 3600})
    assert fresh["stale_count"] == 0
    reaped = await hooks.on_action("reap_worker", {"pool_id": "jobs", "worker": {"worker_id": "w1"}})
    assert (reaped["reaped_worker_id"], reaped["jobs_released"]) == ("w1", 1)
    assert (await hooks._registration.get("w1")).status == "lost"  # type: ignore[union-attr]
    with pytest.raises(workhive.WorkerLost):
        await hooks.on_action("heartbeat", {"worker_id": "w1"})


async def test_scaling_actions_see_the_pool(hooks: WorkhiveWorkerHooks) -> None:
    for n in range(5):
        await hooks._work.pool("jobs").push({"n": n})
    state = await hooks.on_action("get_pool_state", {"pool_id": "jobs", "max_workers": 3})
    spawn = await hooks.on_action("calculate_spawn", state)
    assert (spawn["workers_needed"], spawn["workers_to_spawn"]) == (3, 3)


async def test_missing_arguments_are_flatmachines_errors(hooks: WorkhiveWorkerHooks) -> None:
    with pytest.raises(ValueError, match="worker_id is required"):
        await hooks.on_action("claim_job", {"pool_id": "jobs"})
    with pytest.raises(KeyError, match="never registered"):
        await hooks.on_action("heartbeat", {"worker_id": "ghost"})
