"""Checkpoints and execution locks on the hive: the persistence API, fencing, and a machine killed and resumed."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from engines import Place
from flatmachines.locking import ExecutionLock
from flatmachines.persistence import CheckpointManager, MachineSnapshot, PersistenceBackend

import workhive
from workhive_flatmachines import (
    ExecutionTakenOver,
    HiveHandle,
    WorkhiveExecutionLock,
    WorkhivePersistence,
    hive_checkpoints,
)

STEPS_SCRIPT = Path(__file__).with_name("machine_steps.py")


@pytest_asyncio.fixture
async def persistence(place: Place) -> AsyncIterator[WorkhivePersistence]:
    p = WorkhivePersistence(HiveHandle(place.url, **place.options))
    yield p
    await p.handle.aclose()


def snapshot(execution_id: str, step: int, event: str, created_at: str | None = None, **extra: Any) -> MachineSnapshot:
    fields: dict[str, Any] = {
        "execution_id": execution_id,
        "machine_name": "m",
        "spec_version": "1.0.0",
        "current_state": f"s{step}",
        "context": {"n": step},
        "step": step,
        "event": event,
        **extra,
    }
    if created_at is not None:
        fields["created_at"] = created_at
    return MachineSnapshot(**fields)


@pytest.mark.asyncio
async def test_it_is_a_flatmachines_persistence_backend_and_lock(persistence: WorkhivePersistence) -> None:
    both = hive_checkpoints(persistence.handle)
    assert isinstance(both["persistence"], PersistenceBackend) and isinstance(both["lock"], ExecutionLock)
    assert both["persistence"].handle is both["lock"].handle


@pytest.mark.asyncio
async def test_checkpoints_round_trip_through_flatmachines_checkpoint_manager(
    persistence: WorkhivePersistence,
) -> None:
    manager = CheckpointManager(persistence, "exec-1")
    assert await manager.load_latest() is None
    for step, event in enumerate(["machine_start", "state_enter", "execute"], start=1):
        await manager.save_checkpoint(snapshot("exec-1", step, event))
    latest = await manager.load_latest()
    assert latest is not None and (latest.step, latest.event, latest.context) == (3, "execute", {"n": 3})
    raw = b"\x00\xff not text"
    await persistence.save("exec-1/blob", raw)
    assert await persistence.load("exec-1/blob") == raw
    await persistence.delete("exec-1/blob")
    await persistence.delete("exec-1/blob")  # absent is fine
    assert await persistence.load("exec-1/blob") is None
    stored = await (await persistence.handle.hive()).shared("flatmachines.checkpoints").get("exec-1/latest")
    assert stored == {"text": "exec-1/step_000003_execute.json"}  # readable where it is text
    await persistence.save("exec-1/blob", raw)
    encoded = await (await persistence.handle.hive()).shared("flatmachines.checkpoints").get("exec-1/blob")
    assert base64.b64decode(encoded["base64"]) == raw


@pytest.mark.asyncio
async def test_listing_by_event_and_channel_deleting_and_pruning(persistence: WorkhivePersistence) -> None:
    now = datetime.now(timezone.utc)
    await CheckpointManager(persistence, "old").save_checkpoint(
        snapshot("old", 1, "machine_end", (now - timedelta(hours=2)).isoformat())
    )
    await CheckpointManager(persistence, "waiting").save_checkpoint(
        snapshot("waiting", 1, "waiting", now.isoformat(), waiting_channel="approval/1")
        if "waiting_channel" in MachineSnapshot.__dataclass_fields__
        else snapshot("waiting", 1, "waiting", now.isoformat())
    )
    await CheckpointManager(persistence, "new").save_checkpoint(snapshot("new", 1, "machine_end", now.isoformat()))
    assert await persistence.list_execution_ids() == ["new", "old", "waiting"]
    assert await persistence.list_execution_ids(event="machine_end") == ["new", "old"]
    if "waiting_channel" in MachineSnapshot.__dataclass_fields__:
        assert await persistence.list_execution_ids(waiting_channel="approval/1") == ["waiting"]
    assert await persistence.prune(max_age_seconds=3600) == 1
    assert await persistence.list_execution_ids() == ["new", "waiting"]
    assert await persistence.prune(max_count=1) == 1
    assert len(await persistence.list_execution_ids()) == 1
    with pytest.raises(workhive.InvalidArgument, match="max_count"):
        await persistence.prune(max_count=-1)
    (left,) = await persistence.list_execution_ids()
    await persistence.delete_execution(left)
    assert await persistence.list_execution_ids() == []


@pytest.mark.asyncio
async def test_executions_without_a_readable_latest_snapshot_are_pruned_first(persistence: WorkhivePersistence) -> None:
    """What flatmachines' own MemoryBackend edge-case tests check through its private ``_store``, via the API."""
    now = datetime.now(timezone.utc).isoformat()
    await persistence.save("orphan/step_000001_x.json", json.dumps({"created_at": now}).encode())  # no latest
    await persistence.save("corrupt/latest", b"corrupt/garbage")
    await persistence.save("corrupt/garbage", b"not-json")
    await CheckpointManager(persistence, "fine").save_checkpoint(snapshot("fine", 1, "machine_end", now))
    assert await persistence.prune(max_count=1) == 2
    assert await persistence.list_execution_ids() == ["fine"]
    exact = "2026-05-31T14:00:00+02:00"
    await CheckpointManager(persistence, "fine").save_checkpoint(snapshot("fine", 2, "machine_end", exact))
    latest = await CheckpointManager(persistence, "fine").load_latest()
    assert latest is not None and latest.created_at == exact  # kept verbatim


@pytest.mark.asyncio
async def test_a_key_that_names_no_execution_is_refused(persistence: WorkhivePersistence) -> None:
    with pytest.raises(workhive.InvalidArgument, match="execution id"):
        await persistence.save("no-slash", b"x")
    with pytest.raises(workhive.InvalidArgument, match="bytes"):
        await persistence.save("e/k", "text")  # type: ignore[arg-type]
    assert await persistence.list_execution_ids() == []


@pytest.mark.asyncio
async def test_the_lock_provider_is_the_storages_own_where_it_has_one() -> None:
    """memory://NAME hives get memory://NAME locks (shared in the process), not private ones."""
    lock = WorkhiveExecutionLock("memory://fm-default-locks")
    provider = (await lock.handle.hive()).locks()
    assert getattr(provider, "url", None) == "memory://fm-default-locks"
    await lock.handle.aclose()


@pytest.mark.asyncio
async def test_one_execution_is_locked_by_one_holder_at_a_time(place: Place) -> None:
    """Two handles, as two hosts would have: the second is refused until the first releases."""
    host_a = WorkhiveExecutionLock(HiveHandle(place.url, **place.options))
    host_b = WorkhiveExecutionLock(HiveHandle(place.url, **place.options))
    try:
        assert await host_a.acquire("exec-1") is True
        assert await host_b.acquire("exec-1") is False
        assert await host_a.acquire("exec-1") is False  # not re-entrant, as flatmachines' own locks
        assert await host_b.acquire("exec-2") is True
        await host_a.release("exec-1")
        assert await host_b.acquire("exec-1") is True
        await host_b.release("exec-1")
        await host_b.release("exec-2")
        await host_b.release("exec-2")  # not held: left alone
    finally:
        await host_a.handle.aclose()
        await host_b.handle.aclose()


@pytest.mark.asyncio
async def test_a_holder_whose_lock_was_freed_cannot_overwrite_the_new_holders_checkpoints(place: Place) -> None:
    """Host A's lock is freed behind its back (its session dropped); host B takes the execution over.

    A's next checkpoint is refused and B's progress stays."""
    a = hive_checkpoints(HiveHandle(place.url, **place.options))
    b = hive_checkpoints(HiveHandle(place.url, **place.options))
    try:
        assert await a["lock"].acquire("exec-1")
        await CheckpointManager(a["persistence"], "exec-1").save_checkpoint(snapshot("exec-1", 1, "execute"))
        # What the provider does when A's session or process is gone: the lock is free again.
        hive_a = await a["lock"].handle.hive()
        await hive_a.locks().release(a["lock"].handle.held_executions["exec-1"])
        assert await b["lock"].acquire("exec-1")
        await CheckpointManager(b["persistence"], "exec-1").save_checkpoint(snapshot("exec-1", 2, "execute"))
        with pytest.raises(ExecutionTakenOver, match="taken over") as refused:
            await CheckpointManager(a["persistence"], "exec-1").save_checkpoint(snapshot("exec-1", 2, "state_exit"))
        assert isinstance(refused.value, workhive.LeaseLost)
        with pytest.raises(ExecutionTakenOver):
            await a["persistence"].delete("exec-1/latest")
        latest = await CheckpointManager(b["persistence"], "exec-1").load_latest()
        assert latest is not None and (latest.step, latest.event) == (2, "execute")
        await b["lock"].release("exec-1")
    finally:
        await a["lock"].handle.aclose()
        await b["lock"].handle.aclose()


def run_steps(place: Place, log: Path, *args: str, block_at: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("BLOCK_AT", None)
    if block_at is not None:
        env["BLOCK_AT"] = str(block_at)
    locks = str(place.options.get("locks", "-"))
    return subprocess.Popen(
        [sys.executable, str(STEPS_SCRIPT), place.url, locks, str(log), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def next_json(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    raise AssertionError(f"the machine process ended without a result (exit code {proc.wait(timeout=120)})")


@pytest.mark.parametrize("block_at", [1, 3, 5])
def test_a_machine_killed_mid_run_resumes_in_another_process_and_runs_no_step_twice(
    place: Place, tmp_path: Path, block_at: int
) -> None:
    if place.engine == "memory":
        pytest.skip("a memory hive lives inside one process: nothing survives the kill to resume from")
    log = tmp_path / "steps.log"
    first = run_steps(place, log, "start", block_at=block_at)
    try:
        execution_id = next_json(first)["execution_id"]
        assert next_json(first) == {"blocked": block_at}
        # While it lives, no other process may advance the execution.
        rival = run_steps(place, log, "try", execution_id)
        refused = next_json(rival)
        assert "lock" in refused.get("refused", ""), refused
        assert rival.wait(timeout=120) == 0
    finally:
        first.kill()
        first.wait(timeout=120)
    done_before = log.read_text().splitlines() if log.exists() else []
    assert done_before == [f"step {n}" for n in range(1, block_at)]

    resumed = run_steps(place, log, "resume", execution_id)
    out = next_json(resumed)
    assert resumed.wait(timeout=120) == 0
    assert out["output"]["finished"] is True and str(out["output"]["steps"]) == "5", out
    assert log.read_text().splitlines() == [f"step {n}" for n in range(1, 6)]  # each step once, in order
