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
@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_cancelling_a_running_async_handler_cancels_its_task(handlers, store, tmp_path) -> None:
    if store == "sqlite":
        pytest.importorskip("workhive_sqlite")
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path}/hive.db"  # tmp_path is absolute: ////
    async with workhive.open(url) as hive:
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


# -- timeouts (--timeout) ------------------------------------------------------------------------
async def run_until_empty(hive, handler: str, **options):
    opts = FleetOptions(pool="jobs", handler=handler, storage="memory://", heartbeat=0.05, lease=30.0, **options)
    sink = ListSink()
    runtime = ProcessRuntime(opts, hive=hive, sink=sink)
    code = await asyncio.wait_for(runtime.run(stop_when_empty=True), SAFETY)
    tally = Tally()
    for event in sink.events:
        tally.apply(event)
    return code, tally, runtime


@pytest.mark.asyncio
@pytest.mark.parametrize("handler", ["wait_forever_async", "wait_for_cancel_sync"])
async def test_a_handler_past_its_timeout_is_stopped_and_the_item_fails_until_poisoned(handlers, handler) -> None:
    """An async handler's task is cancelled; a sync one sees ctx.cancelled and returns; each attempt fails."""
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push("forever")
        code, tally, _ = await run_until_empty(
            hive, f"cancel_handlers:{handler}", timeout=0.2, max_attempts=2, grace=SAFETY
        )
        assert code == 0
        item = await pool.get(item_id)
        assert item.state is ItemState.POISONED and item.attempts == 2
        assert "timed out after 0.2 s" in item.error and "did not stop" not in item.error
        assert (tally.failed, tally.poisoned, tally.cancelled) == (1, 1, 0)
        seen = "cancelled-task, ctx.cancelled=True" if handler.endswith("async") else "ctx.cancelled=True"
        assert handlers.seen[item_id] == seen


@pytest.mark.asyncio
async def test_a_sync_handler_that_ignores_its_timeout_gets_its_process_replaced(handlers) -> None:
    """Past the timeout and the grace the process stops (to be replaced); the item's attempt is spent."""
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        stuck, waiting = await pool.push_many(["stuck", "waiting"])
        try:
            code, tally, runtime = await run_until_empty(
                hive, "cancel_handlers:stuck_sync", timeout=0.2, grace=0.2, concurrency=1
            )
        finally:
            handlers.release.set()  # the stuck thread returns; its late result is never sent
        assert code != 0 and f"item {stuck} timed out after 0.2 s" in runtime.exit.reason
        item = await pool.get(stuck)
        assert item.state is ItemState.PENDING and item.attempts == 1
        assert "timed out after 0.2 s (the handler did not stop; its worker process is replaced)" in item.error
        assert (await pool.get(waiting)).state is ItemState.PENDING  # never started: the process stopped first
        assert tally.failed == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("handler", ["wait_forever_async", "wait_for_cancel_sync"])
@pytest.mark.parametrize("fleet_timeout", [None, SAFETY])
async def test_an_items_own_timeout_stops_its_handler_whatever_the_fleet_says(handlers, handler, fleet_timeout) -> None:
    """push(..., timeout=) bounds that item alone: without a fleet --timeout, and under a longer one."""
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push("forever", timeout=0.2, max_attempts=1)
        assert (await pool.get(item_id)).timeout == 0.2
        code, tally, _ = await run_until_empty(hive, f"cancel_handlers:{handler}", timeout=fleet_timeout, grace=SAFETY)
        assert code == 0
        item = await pool.get(item_id)
        assert item.state is ItemState.POISONED and "timed out after 0.2 s" in item.error
        assert item.data == "forever"  # the envelope carrying the timeout never reaches the handler's data
        seen = "cancelled-task, ctx.cancelled=True" if handler.endswith("async") else "ctx.cancelled=True"
        assert handlers.seen[item_id] == seen and tally.poisoned == 1


@pytest.mark.asyncio
async def test_a_bad_item_timeout_is_refused_and_nothing_is_pushed() -> None:
    from workhive.errors import InvalidArgument
    from workhive.models import Job

    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        for bad in (0, -1, float("nan"), float("inf"), True, "5"):
            with pytest.raises(InvalidArgument, match="timeout must be a finite number > 0"):
                await pool.push("x", timeout=bad)
            with pytest.raises(InvalidArgument, match="timeout must be a finite number > 0"):
                await pool.push_many(["fine", Job("x", timeout=bad)])
        assert await pool.size() == 0


# -- progress (ctx.progress) ----------------------------------------------------------------------
def test_bad_progress_values_are_refused_with_what_to_do() -> None:
    from workhive.errors import InvalidArgument
    from workhive.item_progress import check_progress

    for args, said in [
        ((-1,), "done must be a finite number >= 0"),
        ((5, 4), "done (5) is more than total (4)"),
        ((1, -2), "total must be a finite number >= 0"),
        ((float("nan"),), "finite number"),
        ((True,), "done must be"),
        ((1, 2, 3), "note must be a string"),
        ((1, 2, "x" * 501), "keep it to 500"),
    ]:
        with pytest.raises(InvalidArgument, match=said.replace("(", r"\(").replace(")", r"\)")):
            check_progress(*args)
    assert check_progress(0) == {"done": 0, "total": None, "note": None}


@pytest.mark.asyncio
async def test_progress_is_written_while_the_handler_runs_and_its_last_value_at_the_end(handlers) -> None:
    from workhive.cli.status_cmd import gather_status
    from workhive.item_progress import read_progress

    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push("steps")
        runtime, sink, task = await start_fleet(hive, "cancel_handlers:progress_sync")
        try:
            await wait_event(handlers.started, item_id)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + SAFETY
            # A heartbeat writes the latest value (a beat between the two calls may write the first one).
            while (value := await read_progress(hive, "jobs", item_id)) is None or value["done"] != 2:
                assert loop.time() < deadline, f"no heartbeat wrote the latest progress (last seen: {value})"
                await asyncio.sleep(0.01)
            assert (value["done"], value["total"], value["note"], value["token"]) == (2, 3, "two", 1)
            status = await gather_status(hive, "jobs")
            assert status["pools"][0]["progress"][item_id]["note"] == "two"
        finally:
            handlers.release.set()
        await wait_state(pool, item_id, ItemState.DONE)
        await stop_fleet(runtime, sink, task)
        last = await read_progress(hive, "jobs", item_id)
        assert (last["done"], last["note"], last["token"]) == (3, "done", 1)  # written when the handler ended
        assert (await gather_status(hive, "jobs"))["pools"][0]["progress"] == {}  # no longer claimed
