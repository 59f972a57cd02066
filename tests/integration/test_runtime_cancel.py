"""Cancelling running items through the worker runtime, in-process on the memory backend.

The heartbeat carries cancellations: ``Pool.cancel`` marks a claimed item
CANCELLED in storage, and at its next beat the worker process reads its running
claims back and stops those cancelled. Every wait here is on an event a handler
sets (with a generous safety bound), never on a duration.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import workhive
from workhive.models import ItemState
from workhive.runtime.events import ListSink, Tally
from workhive.runtime.options import FleetOptions
from workhive.runtime.process import ProcessRuntime

pytest.importorskip("workhive_memory")
pytestmark = pytest.mark.usefixtures("handlers_on_path")  # the fixture is in conftest.py

#: the longest any wait on a handler's event may take before the test fails (the mechanism broke)
SAFETY = 60.0


@pytest.fixture
def handlers():
    import cancel_handlers

    cancel_handlers.reset()
    yield cancel_handlers
    cancel_handlers.reset()


async def wait_event(table: dict[str, threading.Event], item_id: str) -> None:
    """Wait for the handler of ``item_id`` to set its event in ``table`` (a thread's event, polled from the loop)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SAFETY
    while not (item_id in table and table[item_id].is_set()):
        assert loop.time() < deadline, f"the handler of {item_id} never got there"
        await asyncio.sleep(0.01)


async def wait_state(pool, item_id: str, state: ItemState) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SAFETY
    while (await pool.get(item_id)).state is not state:
        assert loop.time() < deadline, f"{item_id} never became {state}: {await pool.get(item_id)}"
        await asyncio.sleep(0.01)


async def start_fleet(hive, handler: str, **options):
    opts = FleetOptions(
        pool="jobs", handler=handler, storage="memory://", heartbeat=0.05, lease=30.0, concurrency=2, **options
    )
    sink = ListSink()
    runtime = ProcessRuntime(opts, hive=hive, sink=sink)
    task = asyncio.create_task(runtime.run())
    return runtime, sink, task


async def stop_fleet(runtime, sink, task) -> Tally:
    runtime.request_stop()
    await asyncio.wait_for(task, SAFETY)
    tally = Tally()
    for event in sink.events:
        tally.apply(event)
    return tally


@pytest.mark.asyncio
async def test_cancelling_a_running_async_handler_cancels_its_task(handlers) -> None:
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push("forever")
        runtime, sink, task = await start_fleet(hive, "cancel_handlers:wait_forever_async")
        await wait_event(handlers.started, item_id)
        assert await pool.cancel([item_id]) == {item_id: ItemState.CLAIMED}
        await wait_event(handlers.stopped, item_id)
        assert handlers.seen[item_id] == "cancelled-task, ctx.cancelled=True"
        # The fleet goes on working: the next item starts, and is cancelled the same way.
        other = await pool.push("forever too")
        await wait_event(handlers.started, other)
        await pool.cancel([other])
        await wait_event(handlers.stopped, other)
        tally = await stop_fleet(runtime, sink, task)
        item = await pool.get(item_id)
        assert item.state is ItemState.CANCELLED and item.result_payload is None
        assert (tally.cancelled, tally.failed, tally.poisoned, tally.released) == (2, 0, 0, 0)
        assert (await pool.stats()).cancelled == 2


@pytest.mark.asyncio
async def test_a_sync_handler_sees_ctx_cancelled_and_its_late_result_is_not_kept(handlers) -> None:
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push("forever")
        runtime, sink, task = await start_fleet(hive, "cancel_handlers:wait_for_cancel_sync")
        await wait_event(handlers.started, item_id)
        await pool.cancel([item_id])
        await wait_event(handlers.stopped, item_id)
        assert handlers.seen[item_id] == "ctx.cancelled=True"
        tally = await stop_fleet(runtime, sink, task)
        item = await pool.get(item_id)
        assert item.state is ItemState.CANCELLED and item.result_payload is None  # the late result was not stored
        assert (tally.cancelled, tally.done, tally.failed) == (1, 0, 0)


@pytest.mark.asyncio
async def test_cancelling_a_pending_item_means_no_worker_ever_runs_it(handlers) -> None:
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        cancelled, kept = await pool.push_many([1, 2])
        assert await pool.cancel([cancelled]) == {cancelled: ItemState.PENDING}
        runtime, sink, task = await start_fleet(hive, "cancel_handlers:quick_async")
        await wait_state(pool, kept, ItemState.DONE)
        tally = await stop_fleet(runtime, sink, task)
        assert (await pool.get(cancelled)).state is ItemState.CANCELLED
        assert (tally.done, tally.cancelled) == (1, 0)
