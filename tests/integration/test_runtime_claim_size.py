"""The adaptive claim size (``--batch 1``, the default) judges the handlers, not the storage's round trips.

A no-op handler on a storage whose completion call is slow (a remote server, or a
local one on a busy machine) must still grow its claims: the time a batch spends
sending its completions is not handler time. The clock here is the worker module's
``time.monotonic`` and ``time.perf_counter``, moved forward a whole second inside every ``complete`` call, so
the test does not depend on how fast anything really runs.
"""

from __future__ import annotations

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


class _SlowCompletions:
    """A memory storage whose every ``complete`` takes a second on ``clock``; records each claim's limit."""

    def __init__(self, inner: Any, clock: _Clock) -> None:
        self._inner = inner
        self._clock = clock
        self.claim_limits: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> Any:
        self.claim_limits.append(limit)
        return await self._inner.claim(pool, worker_id, limit, lease)

    async def complete(self, pool: str, acks: Any) -> Any:
        self._clock.skipped += 1.0
        return await self._inner.complete(pool, acks)


@pytest.mark.asyncio
@pytest.mark.parametrize("handler", ["handlers:noop", "handlers:echo_async"])
async def test_claims_grow_for_quick_handlers_when_completions_are_slow(monkeypatch, handler):
    from workhive.runtime import worker as worker_module

    clock = _Clock()
    monkeypatch.setattr(worker_module, "time", clock)
    # Generous for a real handler on a loaded machine; a completion takes twice that on the clock.
    monkeypatch.setattr(worker_module, "FAST_HANDLER_SECONDS", 0.5)
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
