"""More lanes never mean more storage calls, flushes or wake-ups per item; every event line stays whole.

Counted in-process on the memory backend through a counting storage wrapper and
wrappers around the worker's own methods: mechanisms, never times (issue 31).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

import workhive
from workhive.models import ItemState
from workhive.runtime import events as ev
from workhive.runtime.events import ListSink, PipeSink, Tally
from workhive.runtime.options import FleetOptions
from workhive.runtime.process import ProcessRuntime
from workhive.runtime.supervisor import _decode

pytest.importorskip("workhive_memory")
pytestmark = pytest.mark.usefixtures("handlers_on_path")  # the fixture is in conftest.py

ITEMS = 4_000


class _Counting:
    """A memory storage that counts claim and complete calls."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.claims = 0
        self.completes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> Any:
        self.claims += 1
        return await self._inner.claim(pool, worker_id, limit, lease)

    async def complete(self, pool: str, acks: Any) -> Any:
        self.completes += 1
        return await self._inner.complete(pool, acks)


class _InstantHandlerClock:
    """The worker module's ``time`` with a ``perf_counter`` that stands still: every handler takes 0 s.

    The worker sizes its batches by the time its handlers take per item (``perf_counter``); a
    no-op measures under 0.1 ms on a quiet machine and over it on a loaded one, so the lanes and
    flushes of a run would depend on the load. With this clock each run counts the same
    mechanism, that of an instant handler; leases, flush deadlines and waits keep real time.
    """

    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)

    @staticmethod
    def perf_counter() -> float:
        return 0.0


async def _drain(monkeypatch: pytest.MonkeyPatch, concurrency: int, handler: str, items: int = ITEMS) -> dict[str, Any]:
    from workhive.runtime import worker as worker_module

    counts = {"flushes": 0, "empty_flushes": 0, "wakeups": 0, "lanes": 0, "held": 0}
    flush_acks = worker_module.Worker._flush_acks
    wait_for_lane = worker_module.Worker._wait_for_lane
    start_lanes = worker_module.Worker._start_lanes

    def counted_lanes(self: Any, items: list[Any], size: int) -> None:
        counts["lanes"] += -(-len(items) // max(1, size))
        counts["held"] = max(counts["held"], self.items_in_flight + len(items))
        start_lanes(self, items, size)

    async def counted_flush(self: Any) -> None:
        counts["flushes"] += 1
        counts["empty_flushes"] += not self._acks
        await flush_acks(self)

    async def counted_wait(self: Any, timeout: float | None, *, until_free: int = 1) -> None:
        counts["wakeups"] += 1
        await wait_for_lane(self, timeout, until_free=until_free)

    monkeypatch.setattr(worker_module.Worker, "_flush_acks", counted_flush)
    monkeypatch.setattr(worker_module.Worker, "_wait_for_lane", counted_wait)
    monkeypatch.setattr(worker_module.Worker, "_start_lanes", counted_lanes)
    monkeypatch.setattr(worker_module, "time", _InstantHandlerClock)
    storage = _Counting(workhive.open("memory://").storage)
    async with workhive.open(storage) as hive:  # type: ignore[arg-type]
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n} for n in range(items)])
        opts = FleetOptions(pool="jobs", handler=handler, concurrency=concurrency, heartbeat=0.2, lease=30.0)
        sink = ListSink()
        code = await ProcessRuntime(opts, hive=hive, sink=sink).run(stop_when_empty=True)
        stored = [await pool.get(i) for i in ids]
    monkeypatch.undo()
    tally = Tally()
    for event in sink.events:
        tally.apply(event)
    assert code == 0 and tally.done == items
    assert all(item.state is ItemState.DONE for item in stored)
    return {**counts, "claims": storage.claims, "completes": storage.completes, "events": sink.events, "ids": ids}


@pytest.mark.asyncio
@pytest.mark.parametrize("handler", ["handlers:noop_async", "handlers:noop"])
async def test_calls_per_item_do_not_grow_with_concurrency(monkeypatch, handler):
    low = await _drain(monkeypatch, 16, handler)
    high = await _drain(monkeypatch, 256, handler)
    for what in ("claims", "completes"):
        # Either fleet claims in batches of hundreds: a few calls over ITEMS items, not one per lane.
        assert low[what] < ITEMS // 50 and high[what] < ITEMS // 50, (what, low[what], high[what])
        # A handful either way is when flushes happen to fall (a loaded machine moves them): what
        # must not happen is a call per lane or per few lanes, 16 times as many lanes at 256.
        assert high[what] <= 2 * low[what] + 4, (what, low[what], high[what])
    for run in (low, high):
        # One flush in the making at a time: a lane whose items never yield does not make one per item.
        assert run["empty_flushes"] <= run["completes"] + 2, (run["empty_flushes"], run["completes"])
        assert run["flushes"] <= 2 * run["completes"] + 4, (run["flushes"], run["completes"])
    # The claim loop is woken when a claim's worth of lanes is free, not by every lane that ends.
    assert high["wakeups"] <= max(low["wakeups"] + 4, 2 * low["wakeups"]), (low["wakeups"], high["wakeups"])


@pytest.mark.asyncio
async def test_instant_handlers_fill_fewer_lanes_within_the_held_bound(monkeypatch):
    """A handler that never waits gains nothing from a lane (a task) per few items: 256 lanes run as few as 16."""
    from workhive.runtime import worker as worker_module

    items = 20_000  # the batches double from one item: most of a few thousand go by while they grow
    low = await _drain(monkeypatch, 16, "handlers:noop_async", items)
    high = await _drain(monkeypatch, 256, "handlers:noop_async", items)
    # Before: ADAPTIVE_MAX_HELD // 256 = 4 items a lane, 5,000 lanes for 20,000 items.
    # (About a thousand of them while the batches grow from one item each, then one per 128.)
    assert high["lanes"] < items // 16, (low["lanes"], high["lanes"])
    for run in (low, high):
        assert run["held"] <= worker_module.ADAPTIVE_MAX_HELD, run["held"]


@pytest.mark.asyncio
async def test_done_events_carry_every_id_in_lines_a_pipe_writes_whole(monkeypatch):
    run = await _drain(monkeypatch, 64, "handlers:noop_async")
    done_ids: list[str] = []
    for event in run["events"]:
        if event[0] == ev.DONE:
            assert event[1] == len(event) - 2
            assert len(json.dumps(event, separators=(",", ":"))) < 3000
            done_ids += event[2:]
    assert sorted(done_ids) == sorted(run["ids"])


@pytest.mark.parametrize(
    "event",
    [
        (ev.START, "host-1-w0-abc#3", "i0000000000000001", 7, 0),
        (ev.START, "h#12", 'odd "id"\\ ü\n', 2**40, 1),
        (ev.START, "h#1", "x", True, 0),  # not the usual shape: the encoder writes it
    ],
)
def test_start_lines_are_what_the_encoder_writes(event):
    read, write = os.pipe()
    try:
        PipeSink(write)(*event)
        line = os.read(read, 4096)
    finally:
        os.close(read)
        os.close(write)
    assert line.endswith(b"\n")
    assert json.loads(line) == json.loads(json.dumps(list(event)))
    assert line == (json.dumps(list(event), separators=(",", ":")) + "\n").encode()
    # ...and the supervisor reads it back as json.loads does, with or without its short cut.
    assert _decode(line.rstrip(b"\n")) == json.loads(line)


@pytest.mark.parametrize(
    "line",
    [
        b'["start","h#1","i1",7,0]',
        b'["start","h#1","i1",7,true]',
        b'["start","h#1","a\\"b",7,0]',
        b'["start","h#1","i1",-7,0]',
        b'["start","h#1","i1",7,0,1]',
        b'["start","h","#1","i1",7]',
        b'["done",2,"i1","i2"]',
    ],
)
def test_the_supervisor_reads_event_lines_as_json_does(line):
    assert _decode(line) == json.loads(line)
