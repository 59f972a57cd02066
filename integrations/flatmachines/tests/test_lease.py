"""Blocking handlers and the lease: the limit, and the two ways out the README gives.

The claim's lease is renewed by a task on the event loop. A synchronous job
that blocks the loop for longer than the lease stops that task: the lease
runs out, another worker may claim the job, and the blocked job's result is
refused. The memory hive's clock is the test's own, so "longer than the lease"
is a step of that clock, never a wait.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from flatmachines.distributed import WorkerRegistration

import workhive
from workhive_flatmachines import HiveHandle, WorkhiveRegistrationBackend, WorkhiveWorkBackend

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def hive_url() -> str:
    return f"memory://lease-{uuid.uuid4().hex}"


async def test_a_job_that_blocks_the_loop_past_the_lease_loses_its_claim() -> None:
    clock = Clock()
    work = WorkhiveWorkBackend(hive_url(), lease=60, clock=clock)
    pool = work.pool("render")
    await pool.push({"doc": 1})
    job = await pool.claim("blocked")
    assert job is not None
    clock.now += 61  # the job held the loop for 61 s: no heartbeat could run
    rival = await pool.claim("other")
    assert rival is not None and rival.id == job.id
    with pytest.raises(KeyError, match="claimed again"):
        await pool.complete(job.id, {"by": "blocked"})
    await pool.complete(rival.id, {"by": "other"})
    await work.aclose()


async def test_a_longer_lease_for_one_pool_keeps_a_blocking_job_its_claim() -> None:
    clock = Clock()
    work = WorkhiveWorkBackend(hive_url(), lease=60, clock=clock, leases={"render": 3600})
    slow, quick = work.pool("render"), work.pool("mail")
    await slow.push({"doc": 1})
    await quick.push({"to": "x"})
    job = await slow.claim("blocked")
    mail = await quick.claim("blocked")
    assert job is not None and mail is not None
    clock.now += 61
    assert await slow.claim("other") is None  # still leased
    assert await quick.claim("other") is not None  # the other pools keep the hive's lease
    await slow.complete(job.id, {"by": "blocked"})
    item = await (await work.handle.hive()).pool("render").get(job.id)
    assert (item.state, item.result) == (workhive.ItemState.DONE, {"by": "blocked"})
    await work.aclose()


async def test_bad_pool_leases_are_refused() -> None:
    with pytest.raises(workhive.InvalidArgument, match="render"):
        WorkhiveWorkBackend(hive_url(), leases={"render": 0})


async def test_a_blocking_job_run_in_a_thread_leaves_the_heartbeat_running() -> None:
    """``await asyncio.to_thread(job)``: the loop stays free, the background heartbeat renews the claim."""
    clock = Clock()
    handle = HiveHandle(hive_url(), lease=60, clock=clock, heartbeat_every=0.05)
    work, registry = WorkhiveWorkBackend(handle), WorkhiveRegistrationBackend(handle)
    await registry.register(WorkerRegistration(worker_id="w1"))
    pool = work.pool("render")
    await pool.push({"doc": 1})
    job = await pool.claim("w1")
    assert job is not None
    hive = await handle.hive()
    first_expiry = (await hive.pool("render").get(job.id)).lease_expires_at
    release = threading.Event()

    def blocking_job() -> dict[str, int]:
        release.wait(timeout=300)
        return {"pages": 3}

    running = asyncio.ensure_future(asyncio.to_thread(blocking_job))
    clock.now += 30
    deadline = time.monotonic() + 120
    while (await hive.pool("render").get(job.id)).lease_expires_at == first_expiry:  # renewed from the loop
        assert time.monotonic() < deadline, "the heartbeat never renewed the claim while the job ran in a thread"
        await asyncio.sleep(0.02)
    clock.now += 45  # past the first expiry: only the renewal keeps the claim
    assert await pool.claim("other") is None
    release.set()
    await pool.complete(job.id, await running)
    assert (await hive.pool("render").get(job.id)).state is workhive.ItemState.DONE
    await handle.aclose()
