"""The adaptive claim size (``--batch 1``, the default) judges the handlers, not the storage's round trips.

A no-op handler on a storage whose completion call is slow (a remote server, or a
local one on a busy machine) must still grow its claims: the time a batch spends
sending its completions is not handler time. The clock here is the worker module's
``time.monotonic`` and ``time.perf_counter``, moved forward a whole second inside every ``complete`` call, so
the test does not depend on how fast anything really runs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import workhive
from workhive.models import ItemState
from workhive.runtime.events import ListSink, Tally
from workhive.runtime.options import FleetOptions
from workhive.runtime.process import ProcessRuntime

pytest.importorskip("workhive_memory")
pytestmark = pytest.mark.usefixtures("handlers_on_path")  # the fixture is in conftest.py

ITEMS = 300


class _Clock:
    """``time`` as the worker module sees it, with a monotonic clock that storage calls can move on."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    def perf_counter(self) -> float:
        return time.perf_counter() + self.skipped

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class _Claims:
    """A memory storage that records each claim's limit, with the backend's claim size of choice."""

    def __init__(self, inner: Any, instant_claim_max: int | None = None) -> None:
        self._inner = inner
        self.instant_claim_max = instant_claim_max
        self.claim_limits: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> Any:
        self.claim_limits.append(limit)
        return await self._inner.claim(pool, worker_id, limit, lease)


class _SlowCompletions(_Claims):
    """A memory storage whose every ``complete`` takes a second on ``clock``; records each claim's limit."""

    def __init__(self, inner: Any, clock: _Clock) -> None:
        super().__init__(inner)
        self._clock = clock

    async def complete(self, pool: str, acks: Any) -> Any:
        self._clock.skipped += 1.0
        return await self._inner.complete(pool, acks)


@pytest.mark.asyncio
@pytest.mark.parametrize("handler", ["handlers:noop", "handlers:echo_async"])
async def test_claims_grow_for_quick_handlers_when_completions_are_slow(monkeypatch, handler):
    from workhive.runtime import worker as worker_module

    clock = _Clock()
    monkeypatch.setattr(worker_module, "time", clock)
    # Generous for a real handler on a loaded machine (batches grow while an item takes under 0.5 s);
    # a completion takes a second on the clock.
    monkeypatch.setattr(worker_module, "LANE_BATCH_SECONDS", 1.0)
    storage = _SlowCompletions(workhive.open("memory://").storage, clock)
    async with workhive.open(storage) as hive:  # type: ignore[arg-type]
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n} for n in range(ITEMS)])
        opts = FleetOptions(pool="jobs", handler=handler, concurrency=1, heartbeat=0.2, lease=30.0)
        sink = ListSink()
        runtime = ProcessRuntime(opts, hive=hive, sink=sink)
        code = await runtime.run(stop_when_empty=True)
        items = [await pool.get(i) for i in ids]
    tally = Tally()
    for event in sink.events:
        tally.apply(event)
    assert code == 0 and tally.done == ITEMS
    assert all(item.state is ItemState.DONE for item in items)
    # Quick handlers: the claim size doubled despite each batch's completion call taking a second.
    assert max(storage.claim_limits) > 1, storage.claim_limits[:10]
    assert len(storage.claim_limits) < ITEMS // 4


@pytest.mark.asyncio
@pytest.mark.parametrize(("seconds", "largest"), [(0.0045, 8), (0.0095, 4), (0.019, 2), (0.045, 1)])
async def test_a_lanes_batch_holds_about_lane_batch_seconds_of_work(monkeypatch, seconds, largest):
    """Claims grow while a batch takes under LANE_BATCH_SECONDS of handler time, and no further.

    The handler takes ``seconds`` on the worker's clock (``handlers:seems_to_take``), so the
    sizes are the rule's, whatever the machine: at 4.5 ms an item a lane's batch grows to
    8 (0.04 s / 4.5 ms), at 9.5 ms to 4, at 19 ms to 2, at 45 ms it stays at one item a
    claim. Real time only adds to what the clock says, so a loaded machine can shrink a
    batch, never grow it.
    """
    from workhive.runtime import worker as worker_module

    clock = _Clock()
    monkeypatch.setattr(worker_module, "time", clock)
    assert worker_module.LANE_BATCH_SECONDS == 0.04
    storage = _SlowCompletions(workhive.open("memory://").storage, clock)
    async with workhive.open(storage) as hive:  # type: ignore[arg-type]
        pool = hive.pool("jobs")
        await pool.push_many([{"seconds": seconds} for _ in range(60)])
        opts = FleetOptions(pool="jobs", handler="handlers:seems_to_take", concurrency=1, heartbeat=0.2, lease=30.0)
        runtime = ProcessRuntime(opts, hive=hive, sink=ListSink())
        assert await runtime.run(stop_when_empty=True) == 0
        assert (await pool.stats()).done == 60
    asked = storage.claim_limits[:-1]  # the last claim found the pool empty
    assert max(asked) <= largest, asked
    if largest > 1:
        assert max(asked) >= 2, asked  # it grew (a loaded machine may stop it short of ``largest``)


class _HeldAtClaims:
    """A memory storage that records, at each claim, what the worker holds plus what it asks for."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.runtime: ProcessRuntime | None = None
        self.held_after: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> Any:
        assert self.runtime is not None
        self.held_after.append(self.runtime.workers[0].items_in_flight + limit)
        return await self._inner.claim(pool, worker_id, limit, lease)


@pytest.mark.asyncio
async def test_many_lanes_of_quick_handlers_hold_at_most_adaptive_max_held():
    """With 64 lanes the per-lane batch stops at ADAPTIVE_MAX_HELD // 64: a process does not hoard the backlog."""
    from workhive.runtime import worker as worker_module

    storage = _HeldAtClaims(workhive.open("memory://").storage)
    async with workhive.open(storage) as hive:  # type: ignore[arg-type]
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n} for n in range(3_000)])
        opts = FleetOptions(pool="jobs", handler="handlers:echo_async", concurrency=64, heartbeat=0.2, lease=30.0)
        sink = ListSink()
        runtime = ProcessRuntime(opts, hive=hive, sink=sink)
        storage.runtime = runtime
        code = await runtime.run(stop_when_empty=True)
        items = [await pool.get(i) for i in ids]
    assert code == 0 and all(item.state is ItemState.DONE for item in items)
    # Quick handlers: batches grew past one item a lane (claims of more than 64)...
    assert max(storage.held_after) > 64, storage.held_after[:20]
    # ...and never past what the bound lets the lanes hold together.
    assert max(storage.held_after) <= worker_module.ADAPTIVE_MAX_HELD, max(storage.held_after)


class _HeldCompletion:
    """A memory storage whose first ``complete`` waits until the test lets it go; counts claims meanwhile."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._let_go = asyncio.Event()
        self.completes = 0
        self.claims_while_held = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> Any:
        if self.completes and not self._let_go.is_set():
            self.claims_while_held += 1
            self._let_go.set()  # the claim went out while the completion was on its way
        return await self._inner.claim(pool, worker_id, limit, lease)

    async def complete(self, pool: str, acks: Any) -> Any:
        self.completes += 1
        await self._let_go.wait()
        return await self._inner.complete(pool, acks)


@pytest.mark.asyncio
@pytest.mark.parametrize("handler", ["handlers:noop", "handlers:echo_async"])
async def test_the_next_claim_travels_while_a_lanes_completions_do(handler):
    """With one lane, the claim after a batch does not wait for the batch's ``complete_many`` to be answered.

    The first completion is held until a claim arrives: had the lane waited for it, no
    claim would come and the run would not end. Every item still ends DONE, and the
    supervisor's count is exact (the completions are waited for before the process exits).
    """
    storage = _HeldCompletion(workhive.open("memory://").storage)
    async with workhive.open(storage) as hive:  # type: ignore[arg-type]
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n} for n in range(50)])
        opts = FleetOptions(pool="jobs", handler=handler, concurrency=1, heartbeat=0.2, lease=30.0)
        sink = ListSink()
        runtime = ProcessRuntime(opts, hive=hive, sink=sink)
        code = await asyncio.wait_for(runtime.run(stop_when_empty=True), 60)
        items = [await pool.get(i) for i in ids]
    tally = Tally()
    for event in sink.events:
        tally.apply(event)
    assert storage.claims_while_held == 1
    assert code == 0 and tally.done == 50
    assert all(item.state is ItemState.DONE for item in items)


@pytest.mark.asyncio
@pytest.mark.parametrize("instant_claim_max", [None, 512, 64])
async def test_an_instant_handlers_claims_grow_to_what_the_backend_says(monkeypatch, instant_claim_max):
    from workhive.runtime import worker as worker_module

    # Every batch judged instant however loaded the machine is (a no-op took over 0.1 ms an item
    # on a busy CI runner, and its claims grew by the lanes' rule instead, up to 256).
    monkeypatch.setattr(worker_module, "INSTANT_HANDLER_SECONDS", 3600.0)
    storage = _Claims(workhive.open("memory://").storage, instant_claim_max)
    async with workhive.open(storage) as hive:  # type: ignore[arg-type]
        pool = hive.pool("jobs")
        await pool.push_many([{"n": n} for n in range(3_000)])
        opts = FleetOptions(pool="jobs", handler="handlers:noop_async", concurrency=1, heartbeat=0.2)
        code = await ProcessRuntime(opts, hive=hive, sink=ListSink()).run(stop_when_empty=True)
        assert code == 0 and (await pool.stats()).done == 3_000
    assert max(storage.claim_limits) == (instant_claim_max or worker_module.ADAPTIVE_MAX_CLAIM), storage.claim_limits
