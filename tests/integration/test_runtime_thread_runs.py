"""Plain-function handlers run several items per trip to the thread pool; each item keeps its own outcome.

In-process on the memory backend, one worker claiming batches of 10: what is checked is
which items ran, in what order, what storage holds after, and the START event before each
call, never how long anything took.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import workhive
from workhive.models import ItemState
from workhive.runtime.events import ListSink
from workhive.runtime.options import ExitCode, FleetOptions
from workhive.runtime.process import ProcessRuntime

pytest.importorskip("workhive_memory")


@pytest.fixture(autouse=True)
def handlers(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import thread_handlers

    thread_handlers.calls.clear()
    thread_handlers.during = None
    yield thread_handlers
    thread_handlers.during = None


def run(data: list[dict[str, Any]], handler: str = "thread_handlers:record", batch: int = 10, **options: Any) -> Any:
    """Push ``data``, run one worker (batch 10) until the pool is empty; return (events, items by n, exit).

    ``exit`` is the runtime's exit code, or a ``SystemExit`` that escaped into the event loop.
    """
    kept: dict[str, Any] = {}

    async def main() -> int:
        hive = kept["hive"] = workhive.open("memory://")
        await hive.open()
        pool = hive.pool("jobs")
        kept["ids"] = await pool.push_many(data)
        kept["sink"] = sink = ListSink()
        opts = FleetOptions(pool="jobs", handler=handler, concurrency=1, batch=batch, lease=60.0, **options)
        kept["runtime"] = runtime = ProcessRuntime(opts, hive=hive, sink=sink)
        return await asyncio.wait_for(runtime.run(stop_when_empty=True), 60)

    async def stored() -> dict[int, Any]:
        pool = kept["hive"].pool("jobs")
        found = {item.data["n"]: item for item in [await pool.get(i) for i in kept["ids"]]}
        await kept["hive"].close()
        return found

    try:
        code: Any = asyncio.run(main())
    except SystemExit as exc:  # asyncio lets it through the loop, as it would end a worker process
        code = exc
    return kept["sink"].events, asyncio.run(stored()), code


def test_quick_items_share_a_trip_and_each_is_announced_before_its_call(handlers: Any) -> None:
    events, stored, code = run([{"n": n} for n in range(10)])
    assert code == 0
    assert [n for n, _ in handlers.calls] == list(range(10))  # in claim order, once each
    assert all(item.state is ItemState.DONE and item.result == {"n": n} for n, item in stored.items())
    starts = [e for e in events if e[0] == "start"]
    assert [e[2] for e in starts] == [stored[n].id for n in range(10)]
    assert all(e[4] == 0 for e in starts)  # none ran alone
    # Every item announced before it was acknowledged: the supervisor can always tell what was running.
    kinds = [e[0] for e in events if e[0] in ("start", "done")]
    assert kinds.index("done") > max(i for i, k in enumerate(kinds) if k == "start")


def test_the_first_exception_ends_the_trip_and_the_items_after_it_still_run(handlers: Any) -> None:
    data = [{"n": n, "do": "boom" if n == 3 else "ok"} for n in range(10)]
    _, stored, code = run(data, max_attempts=1)
    assert code == 0
    assert [n for n, _ in handlers.calls] == list(range(10))
    assert stored[3].state is ItemState.POISONED and "boom on 3" in stored[3].error
    assert all(stored[n].state is ItemState.DONE for n in range(10) if n != 3)


def test_a_stop_during_a_trip_leaves_the_unstarted_items_pending_with_attempts_refunded(handlers: Any) -> None:
    kept: list[tuple[ProcessRuntime, asyncio.AbstractEventLoop]] = []

    async def stop(runtime: ProcessRuntime) -> None:
        runtime.request_stop(0, "test")

    def stop_during_item_one(n: int) -> None:
        if n == 1:  # from the handler's thread: ask the loop, and go on only once it has stopped
            runtime, loop = kept[0]
            asyncio.run_coroutine_threadsafe(stop(runtime), loop).result(30)

    handlers.during = stop_during_item_one
    original = ProcessRuntime.__init__

    def keep(self: ProcessRuntime, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        kept.append((self, asyncio.get_running_loop()))

    ProcessRuntime.__init__ = keep  # type: ignore[method-assign]
    try:
        _, stored, code = run([{"n": n} for n in range(10)])
    finally:
        ProcessRuntime.__init__ = original  # type: ignore[method-assign]
    assert code == 0
    assert [n for n, _ in handlers.calls] == [0, 1]  # nothing started after the stop
    assert stored[0].state is ItemState.DONE and stored[1].state is ItemState.DONE
    rest = [stored[n] for n in range(2, 10)]
    assert all(item.state is ItemState.PENDING and item.attempts == 0 for item in rest)


def test_quick_items_go_in_one_trip(handlers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from workhive.runtime import worker as worker_module

    monkeypatch.setattr(worker_module, "ACK_FLUSH_SECONDS", 600.0)  # no trip is cut short by the clock here
    trips: list[int] = []
    original = worker_module.Worker._call_in_thread

    def count(self: Any, items: Any, start: int, lane: str, *slot: Any) -> Any:
        ran = original(self, items, start, lane, *slot)
        trips.append(len(ran))
        return ran

    monkeypatch.setattr(worker_module.Worker, "_call_in_thread", count)
    _, stored, code = run([{"n": n} for n in range(10)])
    assert code == 0 and all(item.state is ItemState.DONE for item in stored.values())
    assert trips == [10]


def test_a_system_exit_in_the_handler_charges_its_item_after_settling_the_ones_before_it(handlers: Any) -> None:
    data = [{"n": n, "do": "exit" if n == 4 else "ok"} for n in range(10)]
    events, stored, code = run(data)
    # The process stops (and a supervisor replaces it); the exception never reaches the event loop.
    assert code == ExitCode.FAILURE
    assert [n for n, _ in handlers.calls] == [0, 1, 2, 3, 4]
    assert all(stored[n].state is ItemState.DONE for n in range(4))  # settled before the process stopped
    exited = stored[4]  # it spent its attempt: poisoned after max_attempts, like any item that ends its process
    assert exited.state is ItemState.PENDING and exited.attempts == 1, exited
    assert exited.error == "its worker process exited with SystemExit: 3"
    assert [e[2] for e in events if e[0] == "failed"] == [exited.id]
    # The rest of the batch never started: given back with their attempt refunded.
    assert all(stored[n].state is ItemState.PENDING and stored[n].attempts == 0 for n in range(5, 10))


def test_a_plain_function_returning_a_coroutine_is_awaited_on_the_loop(handlers: Any) -> None:
    _, stored, code = run([{"n": n} for n in range(4)], handler="thread_handlers:returns_coroutine")
    assert code == 0
    assert all(stored[n].state is ItemState.DONE and stored[n].result == {"n": n, "awaited": 1} for n in range(4))


def test_an_item_given_back_before_goes_the_one_at_a_time_way(handlers: Any) -> None:
    """A released item may be a crash suspect: it is looked up first, never run in a trip with others."""
    from workhive.runtime import worker as worker_module

    seen: list[str] = []
    original = worker_module.Worker._run_one

    async def spy(self: Any, item: Any, lane: str, *announced: Any) -> float:
        seen.append(item.id)
        return await original(self, item, lane, *announced)  # the seconds its handler took

    async def go() -> Any:
        async with workhive.open("memory://") as hive:
            pool = hive.pool("jobs")
            given_back = await pool.push_many([{"n": n} for n in range(3)])
            for item in await pool.claim_many(3, "earlier"):
                await pool.release(item, delay=0.0)  # each now has releases == 1
            fresh = await pool.push_many([{"n": n} for n in range(10, 14)])
            opts = FleetOptions(pool="jobs", handler="thread_handlers:record", concurrency=1, batch=10)
            await asyncio.wait_for(ProcessRuntime(opts, hive=hive, sink=ListSink()).run(stop_when_empty=True), 60)
            return given_back, fresh, [await pool.get(i) for i in given_back + fresh]

    worker_module.Worker._run_one = spy  # type: ignore[method-assign]
    try:
        given_back, fresh, stored = asyncio.run(go())
    finally:
        worker_module.Worker._run_one = original  # type: ignore[method-assign]
    assert all(item.state is ItemState.DONE for item in stored)
    assert set(seen) == set(given_back)  # each released item went one at a time
    assert not set(seen) & set(fresh)  # the fresh ones went in trips


def test_claims_grow_by_the_time_items_ran_not_by_a_slow_trip_to_the_thread(
    handlers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quick handler on a loaded machine: the trip back from the thread pool waits, the handler does not.

    Each trip reports its items as having taken no time, then sleeps 10 ms before it returns
    (a hand-off waiting for a CPU, a quarter of LANE_BATCH_SECONDS per item). The adaptive claim
    (batch 1) still doubles: it judges the handler, so a busy machine does not shrink claims
    to one item each, a round trip per item.
    """
    import time

    from workhive.pool import Pool
    from workhive.runtime import worker as worker_module

    original = worker_module.Worker._call_in_thread

    def slow_trip(self: Any, items: Any, start: int, lane: str, *slot: Any) -> Any:
        ran = [(item, result, exc, 0.0) for item, result, exc, _ in original(self, items, start, lane, *slot)]
        time.sleep(0.01)
        return ran

    asked: list[int] = []
    claim_many = Pool.claim_many

    async def record(self: Pool, limit: int, *args: Any, **kwargs: Any) -> Any:
        asked.append(limit)
        return await claim_many(self, limit, *args, **kwargs)

    monkeypatch.setattr(worker_module.Worker, "_call_in_thread", slow_trip)
    monkeypatch.setattr(Pool, "claim_many", record)
    _, stored, code = run([{"n": n} for n in range(40)], batch=1)
    assert code == 0 and all(item.state is ItemState.DONE for item in stored.values())
    assert asked[:4] == [1, 2, 4, 8], asked
