"""A process that waits (issue 31): its items in flight, not workers, are the unit of concurrency.

One worker process runs in-process on a memory backend whose calls are counted
(``CountingBackend``). Its handlers all wait on one gate, so the test sees the
process holding every item at once, then lets them go. Nothing waits on time:
the test steps on the heartbeat loop's rounds and on events, with a generous bound.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import workhive
from workhive.models import ItemState, WorkerStatus
from workhive.runtime.call_counts import CountingBackend
from workhive.runtime.events import ListSink, Tally
from workhive.runtime.options import FleetOptions
from workhive.runtime.process import ProcessRuntime

from .conftest import bookkeeping_child

pytest.importorskip("workhive_memory")
pytestmark = pytest.mark.usefixtures("handlers_on_path")

ITEMS = 200
BOUND = 120.0  # a run that hangs fails, it does not hang


@pytest.mark.asyncio
async def test_one_worker_holds_every_item_with_one_claim_and_one_heartbeat_a_beat(monkeypatch):
    """200 items in flight: one registration, one claim, one heartbeat per round, one completion call."""
    import settle_handlers

    from workhive.runtime import worker as worker_module

    # Completions wait for the last lane to end (no flush cut short by the clock), to count them.
    monkeypatch.setattr(worker_module, "ACK_FLUSH_SECONDS", 600.0)
    gate = asyncio.Event()
    settle_handlers.gates = {"all": gate}
    storage = CountingBackend(workhive.open("memory://").storage)
    async with workhive.open(storage) as hive:  # type: ignore[arg-type]
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n, "gate": "all"} for n in range(ITEMS)])
        started: set[str] = set()
        all_in_flight = asyncio.Event()
        beats_at_round: list[int] = []
        three_rounds = asyncio.Event()

        starts: list[list[Any]] = []

        def on_event(event: list[Any]) -> None:
            if event[0] in ("start", "starts"):
                starts.append(event)
                # START: lane, item id, token, alone; STARTS: worker id, then lane, item id, token for each
                started.update([event[2]] if event[0] == "start" else event[3::3])
                if len(started) == ITEMS:
                    all_in_flight.set()

        sink = ListSink(on_event=on_event)
        opts = FleetOptions(pool="jobs", handler="settle_handlers:gated", concurrency=ITEMS, heartbeat=0.01)
        runtime = ProcessRuntime(opts, hive=hive, sink=sink)
        publish = runtime.counts.publish_soon

        def one_round() -> None:  # the heartbeat loop calls it once a round, before its beats
            if all_in_flight.is_set() and not three_rounds.is_set():
                beats_at_round.append(storage.counts["heartbeat"])
                if len(beats_at_round) == 4:
                    three_rounds.set()
            publish()

        runtime.counts.publish_soon = one_round  # type: ignore[method-assign]
        said_in_flight = asyncio.Event()
        update_status = hive.workers.update_status

        async def status_written(worker_id: str, status: Any, detail: str | None = None) -> None:
            await update_status(worker_id, status, detail)
            if detail == f"{ITEMS} in flight":
                said_in_flight.set()

        hive.workers.update_status = status_written  # type: ignore[method-assign]
        run = asyncio.ensure_future(runtime.run(stop_when_empty=True))
        try:
            await asyncio.wait_for(all_in_flight.wait(), BOUND)
            claims_while_full = storage.counts["claim"]
            await asyncio.wait_for(three_rounds.wait(), BOUND)
            [worker] = runtime.workers

            await asyncio.wait_for(said_in_flight.wait(), BOUND)
            record = await hive.workers.get(worker.worker_id)
            listed = await hive.workers.list()
        finally:
            gate.set()
        code = await asyncio.wait_for(run, BOUND)
        items = [await pool.get(i) for i in ids]
    tally = Tally()
    for event in sink.events:
        tally.apply(event)
    assert code == 0 and tally.done == ITEMS
    assert all(item.state is ItemState.DONE for item in items)
    # One registry row for the whole process, saying how much it holds.
    assert [r.worker_id for r in listed] == [worker.worker_id] and storage.counts["register_worker"] == 1
    assert record.status is WorkerStatus.BUSY and f"concurrency={ITEMS}" in record.capabilities
    # Every item came with the first claim: no claimers racing, no claim per item.
    assert claims_while_full == 1
    # Each round of the heartbeat loop made exactly one heartbeat call, for all 200 leases.
    assert [b - beats_at_round[0] for b in beats_at_round] == [0, 1, 2, 3]
    assert {item.claimed_by for item in items} == {worker.worker_id}
    # The 200 completions went in one call, as did their START events' claims.
    assert storage.counts["complete"] == 1
    # The claim's 200 items were announced to the supervisor in 4 events (50 claims each), not 200.
    assert [e[0] for e in starts] == ["starts"] * 4
    assert [len(e[2:]) for e in starts] == [150] * 4 and all(e[1] == worker.worker_id for e in starts)
    assert all(len(json.dumps(e)) < 4096 for e in starts)  # each one atomic write to the pipe (PIPE_BUF)


@pytest.mark.asyncio
async def test_a_lane_ending_lets_the_claim_loop_fill_it_again():
    """Concurrency 3 over 10 items whose handlers return at once: all done, never more than 3 lanes running.

    (A lane may hold a batch: with fast handlers the claim size doubles, as it did per worker.)
    """
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n} for n in range(10)])
        in_flight: list[int] = []
        runtime: ProcessRuntime

        def on_event(event: list[Any]) -> None:
            if event[0] == "start":
                in_flight.append(runtime.workers[0].lanes_busy)
            elif event[0] == "starts":  # several lanes' first claims at once
                in_flight.extend([runtime.workers[0].lanes_busy] * (len(event[2:]) // 3))

        opts = FleetOptions(pool="jobs", handler="handlers:echo_async", concurrency=3)
        runtime = ProcessRuntime(opts, hive=hive, sink=ListSink(on_event=on_event))
        code = await asyncio.wait_for(runtime.run(stop_when_empty=True), BOUND)
        items = [await pool.get(i) for i in ids]
    assert code == 0 and all(item.state is ItemState.DONE for item in items)
    assert len(in_flight) == 10 and max(in_flight) <= 3


@pytest.mark.asyncio
async def test_a_completion_frees_a_limited_slot_without_a_wake_up_from_storage():
    """Pool limit 1, concurrency 4, and a storage whose ``wait_for_work`` never returns.

    Each claim after the first comes back empty while the one item in flight holds the pool's only
    slot. Storage sends no wake-up for a completion (PostgreSQL's NOTIFY is for pushes), so only the
    worker's own completion can send its claim loop back: without that, the run waits for ever.
    """
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        await pool.set_limit(1)
        ids = await pool.push_many([{"n": n} for n in range(6)])
        never = asyncio.Event()

        async def no_wake_up(pool_name: str, timeout: float) -> None:
            await never.wait()

        hive.storage.wait_for_work = no_wake_up  # type: ignore[method-assign]
        opts = FleetOptions(pool="jobs", handler="handlers:echo_async", concurrency=4)
        runtime = ProcessRuntime(opts, hive=hive, sink=ListSink())
        code = await asyncio.wait_for(runtime.run(stop_when_empty=True), BOUND)
        items = [await pool.get(i) for i in ids]
    assert code == 0 and all(item.state is ItemState.DONE for item in items)


@pytest.mark.asyncio
async def test_the_shared_wait_for_work_ends_with_the_run():
    """A wait for work still in flight when the run ends is cancelled there, before the storage closes.

    Left running it outlived the run: the caller then closed the hive under it, and the wait failed
    with "storage ... is not open", logged as a warning by every idle process of a fleet at its end.
    """
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        await pool.set_limit(1)  # claims come back empty while the one slot is taken: workers wait
        await pool.push_many([{"n": n} for n in range(4)])
        never = asyncio.Event()
        waits: list[str] = []

        async def no_wake_up(pool_name: str, timeout: float) -> None:
            waits.append("started")
            try:
                await never.wait()
            finally:
                waits.append("ended")

        hive.storage.wait_for_work = no_wake_up  # type: ignore[method-assign]
        opts = FleetOptions(pool="jobs", handler="handlers:echo_async", concurrency=4)
        runtime = ProcessRuntime(opts, hive=hive, sink=ListSink())
        code = await asyncio.wait_for(runtime.run(stop_when_empty=True), BOUND)
        ended_with_the_run = list(waits)
    assert code == 0 and "started" in ended_with_the_run
    assert ended_with_the_run.count("ended") == ended_with_the_run.count("started"), ended_with_the_run


@pytest.mark.asyncio
async def test_no_status_is_written_once_deregistration_began():
    """STOPPED is the last word: a status wished while deregistering (a heartbeat's in-flight count,
    a lane ending) is dropped, or, written after it, it would leave a stopped worker BUSY."""
    from workhive.runtime.worker import Worker

    async with workhive.open("memory://") as hive:
        opts = FleetOptions(pool="jobs", handler="handlers:echo_async", concurrency=4)
        runtime = ProcessRuntime(opts, hive=hive, sink=ListSink())
        worker = Worker(runtime, 0)
        await worker.register()
        deregister = hive.workers.deregister

        async def deregister_while_a_status_is_wished(worker_id: str) -> int:
            worker._status(WorkerStatus.BUSY, "3 in flight")  # e.g. the heartbeat loop, meanwhile
            released = await deregister(worker_id)
            worker._status(WorkerStatus.IDLE, None)  # e.g. the last lane ending, after
            return released

        hive.workers.deregister = deregister_while_a_status_is_wished  # type: ignore[method-assign]
        await worker.deregister()
        if worker._status_writer is not None:
            await worker._status_writer
        record = await hive.workers.get(worker.worker_id)
    assert record.status is WorkerStatus.STOPPED


@pytest.mark.asyncio
async def test_fast_handlers_claim_more_per_lane_however_long_their_completions_take(monkeypatch):
    """The adaptive claim size is judged by the handlers' own time, not the lane's.

    A lane's wall time holds more than its handlers: the other lanes' turns, and its
    completions' round trip. Here the clock (the worker's, faked) moves only while
    storage completes, ten seconds a call, and the handler returns at once: the claim
    size must still double, so some claim asks for more items than the worker has lanes.
    Judged by the lane's time, every claim asked for one item a lane.
    """
    import time as real_time
    import types

    from workhive.runtime import worker as worker_module

    now = [0.0]
    fake = types.SimpleNamespace(
        monotonic=lambda: real_time.monotonic() + now[0],
        perf_counter=lambda: real_time.perf_counter() + now[0],
        time=real_time.time,
    )
    monkeypatch.setattr(worker_module, "time", fake)
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n} for n in range(40)])
        complete, claim = hive.storage.complete, hive.storage.claim
        asked: list[int] = []

        async def slow_complete(pool_name: str, acks: Any) -> Any:
            now[0] += 10.0  # a slow round trip, on the worker's clock
            return await complete(pool_name, acks)

        async def counted_claim(pool_name: str, worker_id: str, limit: int, lease: float) -> Any:
            asked.append(limit)
            return await claim(pool_name, worker_id, limit, lease)

        hive.storage.complete = slow_complete  # type: ignore[method-assign]
        hive.storage.claim = counted_claim  # type: ignore[method-assign]
        opts = FleetOptions(pool="jobs", handler="handlers:echo_async", concurrency=1)
        runtime = ProcessRuntime(opts, hive=hive, sink=ListSink())
        code = await asyncio.wait_for(runtime.run(stop_when_empty=True), BOUND)
        items = [await pool.get(i) for i in ids]
    assert code == 0 and all(item.state is ItemState.DONE for item in items)
    assert max(asked) > 1  # one lane, yet claims of several items: the size doubled


def test_the_supervisor_records_claims_announced_together_as_it_does_each_start() -> None:
    """A STARTS event (a claim's lanes, announced in one write) leaves the supervisor's record as their STARTs would."""
    from workhive.runtime import events as ev
    from workhive.runtime.supervisor import Supervisor

    async def main() -> tuple[Any, Any]:
        async with workhive.open("memory://") as hive:
            sup = Supervisor(FleetOptions(pool="jobs", handler="json:dumps", storage="memory://"), hive, None)
            each, together = bookkeeping_child(), bookkeeping_child()
            sup._on_event(each, [ev.START, "w-1#7", "i0000000000000001", 3, 1])  # one alone, then two more
            sup._on_event(together, [ev.START, "w-1#7", "i0000000000000001", 3, 1])
            for n, (lane, token) in enumerate(((0, 5), (7, 2))):
                sup._on_event(each, [ev.START, f"w-1#{lane}", f"i000000000000000{n + 2}", token, 0])
            sup._on_event(together, [ev.STARTS, "w-1", 0, "i0000000000000002", 5, 7, "i0000000000000003", 2])
            return each, together

    each, together = asyncio.run(main())
    assert (
        together.running
        == each.running
        == {
            "w-1#0": ("i0000000000000002", 5),
            "w-1#7": ("i0000000000000003", 2),
        }
    )
    assert together.unreported == each.unreported
    assert together.alone is None and each.alone is None  # the one alone is no longer the last word


def test_the_supervisor_reads_a_dead_process_s_lane_board_as_its_starts_would_have_said() -> None:
    """BATCH events and the lane board leave the record of what ran as each item's START would have.

    Lane 0 was running the third item of its batch (announced in two lines). Lane 1 had not
    begun its second batch: its slot still names the first, which had ended, so nothing ran
    there (a START record names the last item started, finished or not). In lane 2 the
    batch's second item ran alone: its START is the last word. Lane 3's second line was lost:
    the items it would have named are not guessed at.
    """
    from workhive.runtime import events as ev
    from workhive.runtime.board import LaneBoard
    from workhive.runtime.supervisor import Supervisor

    board = LaneBoard.create(4)
    if board is None:
        pytest.skip("no memfd_create on this platform: every item has its START event")
    worker = LaneBoard.attach(board.fd, 4)  # the worker process's side, on the same memory

    def item(n: int) -> str:
        return f"i{n:016x}"

    def claims(*numbers: int) -> list[Any]:  # item id, token (100 + n) for each
        return [part for n in numbers for part in (item(n), 100 + n)]

    async def main() -> tuple[Any, Any]:
        async with workhive.open("memory://") as hive:
            sup = Supervisor(FleetOptions(pool="jobs", handler="json:dumps", storage="memory://"), hive, None)
            each, boarded = bookkeeping_child(), bookkeeping_child(board=board)

            def start(lane: int, n: int, alone: int = 0) -> None:
                sup._on_event(each, [ev.START, f"w-1#{lane}", item(n), 100 + n, alone])

            sup._on_event(boarded, [ev.BATCH, "w-1#0", 5, 0, *claims(1, 2)])
            sup._on_event(boarded, [ev.BATCH, "w-1#0", 5, 2, *claims(3, 4)])
            for index, n in enumerate((1, 2, 3)):
                worker.write(0, 5, index)
                start(0, n)
            sup._on_event(boarded, [ev.BATCH, "w-1#1", 6, 0, *claims(5, 6)])
            for index, n in enumerate((5, 6)):
                worker.write(1, 6, index)
                start(1, n)
            sup._on_event(boarded, [ev.BATCH, "w-1#1", 9, 0, *claims(7, 8)])
            sup._on_event(boarded, [ev.BATCH, "w-1#2", 7, 0, *claims(9, 10)])
            worker.write(2, 7, 0)
            start(2, 9)
            sup._on_event(boarded, [ev.BATCH, "w-1#3", 8, 0, *claims(13)])
            sup._on_event(boarded, [ev.BATCH, "w-1#3", 8, 2, *claims(14, 15)])  # the line at offset 1 never came
            worker.write(3, 8, 1)
            for child in (each, boarded):  # the last word: nothing is announced while it runs alone
                sup._on_event(child, [ev.START, "w-1#2", item(10), 110, 1])
            boarded.read_board()
            return each, boarded

    each, boarded = asyncio.run(main())
    assert boarded.running == {"w-1#0": (item(3), 103), "w-1#2": (item(10), 110)}
    assert each.running == boarded.running | {"w-1#1": (item(6), 106)}
    assert boarded.alone == each.alone == (item(10), 110)
    assert board.fd == -1 and not boarded.batches  # read once, then let go
    # In question (counted if storage says they were settled): what started, as with STARTs, and what
    # the lost line named (it cannot be placed). Lane 0's fourth item and lane 1's second batch never started.
    assert set(boarded.unreported) == {item(n) for n in (1, 2, 3, 5, 6, 9, 10, 13, 14, 15)}
    assert set(each.unreported) == {item(n) for n in (1, 2, 3, 5, 6, 9, 10)}
    worker.close()
