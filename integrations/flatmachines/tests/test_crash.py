"""A worker claims through the hooks and dies (or freezes); the reaper action frees its job;
another worker completes it; the first worker's late completion is refused."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import workhive
from workhive_flatmachines import WorkhiveWorkerHooks

pytestmark = pytest.mark.asyncio

WORKER = Path(__file__).with_name("crash_worker.py")


def start_worker(url: str, worker_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), url, worker_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def read_json(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the worker process exited early (code {proc.wait(timeout=60)})"
    return json.loads(line)  # type: ignore[no-any-return]


async def reap_when_stale(reaper: WorkhiveWorkerHooks) -> dict[str, Any]:
    """The stale-worker reaper machine's two actions, repeated until the silent worker shows up."""
    deadline = time.monotonic() + 60
    while True:
        ctx = await reaper.on_action("list_stale_workers", {"pool_id": "jobs", "stale_threshold_seconds": 1})
        if ctx["stale_count"]:
            break
        assert time.monotonic() < deadline, "the silent worker never turned stale"
        await asyncio.sleep(0.1)
    return await reaper.on_action("reap_stale_workers", {"pool_id": "jobs", "stale_workers": ctx["workers"]})


async def finish_elsewhere(url: str) -> tuple[WorkhiveWorkerHooks, str]:
    other = WorkhiveWorkerHooks(storage=url, lease=600)
    ctx = await other.on_action("register_worker", {"pool_id": "jobs", "worker_id": "rescuer"})
    ctx = await other.on_action("claim_job", ctx)
    assert ctx["job"] == {"task": "summarise"}
    ctx["result"] = {"by": "rescuer"}
    await other.on_action("complete_job", ctx)
    return other, ctx["job_id"]


async def seed(url: str) -> str:
    async with workhive.open(url) as hive:
        return await hive.pool("jobs").push({"task": "summarise"})


async def test_a_killed_workers_job_is_reaped_finished_elsewhere_and_its_late_completion_refused(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'hive.db'}"
    pushed = await seed(url)
    proc = start_worker(url, "doomed")
    try:
        dead_context = read_json(proc)
        dead_job = dead_context["job_id"]
    finally:
        proc.kill()
        proc.wait(timeout=60)
    reaper = WorkhiveWorkerHooks(storage=url)
    reaped = await reap_when_stale(reaper)
    assert (reaped["reaped_workers"], reaped["total_jobs_released"]) == (["doomed"], 1)
    other, rescued_job = await finish_elsewhere(url)
    assert rescued_job == dead_job == pushed

    # The dead worker's context (say, resumed from its checkpoint) tries to complete:
    # the claim's receipt it carries fences it, in a process that never held the claim.
    late = WorkhiveWorkerHooks(storage=url)
    with pytest.raises(KeyError, match="token 1: it was completed already") as refused:
        await late.on_action("complete_job", {"pool_id": "jobs", **dead_context, "result": {"by": "doomed"}})
    assert isinstance(refused.value, workhive.LeaseLost)
    hive = await late.handle.hive()
    item = await hive.pool("jobs").get(pushed)
    assert (item.state, item.result, item.claimed_by) == (workhive.ItemState.DONE, {"by": "rescuer"}, "rescuer")
    assert (await late._registration.get("doomed")).status == "lost"  # type: ignore[union-attr]
    for hooks in (reaper, other, late):
        await hooks.aclose()


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP/SIGCONT")
async def test_a_frozen_worker_that_wakes_up_after_being_reaped_cannot_complete(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hive.db'}"
    pushed = await seed(url)
    proc = start_worker(url, "sleepy")
    try:
        read_json(proc)
        os.kill(proc.pid, signal.SIGSTOP)
        reaper = WorkhiveWorkerHooks(storage=url)
        reaped = await reap_when_stale(reaper)
        assert (reaped["reaped_workers"], reaped["total_jobs_released"]) == (["sleepy"], 1)
        other, _ = await finish_elsewhere(url)
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        outcome = read_json(proc)
        assert outcome["refused"] == "ClaimLost", outcome  # a workhive.LeaseLost and a KeyError
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=60)
    hive = await reaper.handle.hive()
    item = await hive.pool("jobs").get(pushed)
    assert (item.state, item.result) == (workhive.ItemState.DONE, {"by": "rescuer"})
    await reaper.aclose()
    await other.aclose()
