"""Settlements whose outcome is unknown (issue 24): sent again until storage answers, never held forever.

A worker process runs in-process on a memory backend wrapped so that its
settling calls (complete, fail, release, deregistration's release_by_worker)
and claims fail as each test scripts: ``applied`` (the call takes effect, then the
connection "drops": ``OutcomeUnknown``), ``lost`` (``OutcomeUnknown``, nothing
applied) or ``invalid`` (the store refuses the value, nothing applied). Nothing
waits on time: runs end when the pool drains or when the worker's first empty
claim says so (``ran_dry``), and what a test waits for is an event, with a
generous bound.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import workhive
from workhive.errors import InvalidItem, OutcomeUnknown
from workhive.models import ItemState, WorkItem
from workhive.plugin_manager import PluginManager
from workhive.runtime.events import ListSink, Tally
from workhive.runtime.health import HealthPolicy
from workhive.runtime.options import ExitCode, FleetOptions
from workhive.runtime.process import ProcessRuntime

pytest.importorskip("workhive_memory")
pytestmark = pytest.mark.usefixtures("handlers_on_path")  # the fixture is in conftest.py

#: bound on a run that should end by itself in well under a second (a hung run fails, it does not hang)
RUN_BOUND = 120.0


class FaultyStorage:
    """A backend that fails settling calls as scripted, and records every heartbeat.

    ``plan[method]`` lists one fault per call of ``method`` (claim, complete, fail,
    release, release_by_worker), consumed in order (``ok``: that call goes through); a
    fault ending in ``*`` stays (every call fails). ``only``: item ids whose calls the plan applies to (None: all).
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.plan: dict[str, list[str]] = defaultdict(list)
        self.only: set[str] | None = None
        self.raised: list[tuple[str, str]] = []  # (method, fault) of every fault raised
        self.heartbeats: list[str] = []  # worker id of every heartbeat, in call order
        self.on_fault: Callable[[], None] | None = None
        self.on_heartbeat: Callable[[], None] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _call(self, method: str, ids: list[str] | None, call: Callable[[], Awaitable[Any]]) -> Any:
        plan = self.plan[method]
        if not plan or (self.only is not None and ids is not None and not self.only & set(ids)):
            return await call()
        fault = plan[0] if plan[0].endswith("*") else plan.pop(0)
        fault = fault.rstrip("*")
        if fault == "ok":
            return await call()
        self.raised.append((method, fault))
        if self.on_fault is not None:
            self.on_fault()
        if fault == "applied":
            await call()
        if fault == "invalid":
            raise InvalidItem("the result is too large for this store (the test's fault)")
        raise OutcomeUnknown(f"the connection dropped during {method} (the test's fault)")

    async def claim(self, *args: Any) -> Any:
        return await self._call("claim", None, lambda: self._inner.claim(*args))

    async def complete(self, pool: str, acks: Any) -> Any:
        return await self._call("complete", [a.item_id for a in acks], lambda: self._inner.complete(pool, acks))

    async def fail(self, pool: str, item_id: str, *args: Any) -> Any:
        return await self._call("fail", [item_id], lambda: self._inner.fail(pool, item_id, *args))

    async def release(self, pool: str, item_id: str, *args: Any) -> Any:
        return await self._call("release", [item_id], lambda: self._inner.release(pool, item_id, *args))

    async def release_by_worker(self, *args: Any) -> Any:
        return await self._call("release_by_worker", None, lambda: self._inner.release_by_worker(*args))

    async def heartbeat(self, worker_id: str) -> Any:
        self.heartbeats.append(worker_id)
        if self.on_heartbeat is not None:
            self.on_heartbeat()
        return await self._inner.heartbeat(worker_id)


class HookRecorder:
    """An in-code plugin counting the item event hooks, as (hook, item id)."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()

    @workhive.hookimpl
    def workhive_item_completed(self, pool: str, item: WorkItem) -> None:
        self.calls["completed", item.id] += 1

    @workhive.hookimpl
    def workhive_item_failed(self, pool: str, item: WorkItem, error: str, retry_in: float) -> None:
        self.calls["failed", item.id] += 1

    @workhive.hookimpl
    def workhive_item_poisoned(self, pool: str, item: WorkItem, error: str) -> None:
        self.calls["poisoned", item.id] += 1


def faulty_hive(**options: Any) -> tuple[workhive.Hive, FaultyStorage, HookRecorder]:
    storage = FaultyStorage(workhive.open("memory://").storage)
    hooks = HookRecorder()
    manager = PluginManager(entry_points=False, extra=[("hook-recorder", hooks)])
    return workhive.open(storage, backoff="none", manager=manager, **options), storage, hooks  # type: ignore[arg-type]


async def run(
    hive: workhive.Hive,
    handler: str,
    *,
    stop_when_ran_dry: bool = True,
    on_event: Callable[[ProcessRuntime, list[Any]], None] | None = None,
    started: Callable[[ProcessRuntime], None] | None = None,
    **options: Any,
) -> tuple[int, Tally, list[list[Any]], ProcessRuntime]:
    """One worker process until the pool drains (or its workers' first empty claim); its code, tally and events."""
    settings: dict[str, Any] = {"heartbeat": 0.05, "lease": 30.0, "concurrency": 1, **options}
    opts = FleetOptions(pool="jobs", handler=handler, storage="memory://", **settings)
    runtime: ProcessRuntime

    def watch(event: list[Any]) -> None:
        if on_event is not None:
            on_event(runtime, event)
        if stop_when_ran_dry and event[0] == "ran_dry":
            # Whatever the worker still holds now, it will never settle: stop and look.
            runtime.request_stop(0, "the worker ran dry")

    sink = ListSink(on_event=watch)
    runtime = ProcessRuntime(opts, hive=hive, sink=sink, health_policy=HealthPolicy(failures_before_pause=1000))
    if started is not None:
        started(runtime)
    code = await asyncio.wait_for(runtime.run(stop_when_empty=True), RUN_BOUND)
    tally = Tally()
    for event in sink.events:
        tally.apply(event)
    return code, tally, sink.events, runtime


def ids_of(events: list[list[Any]], kind: str) -> Counter[str]:
    """How many times each item id was reported in events of ``kind`` (done: n, ids…; failed/poisoned: 1, id, text)."""
    found: Counter[str] = Counter()
    for event in events:
        if event[0] == kind:
            found.update(event[2:] if kind == "done" else event[2:3])
    return found


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", ["applied", "lost"])
async def test_a_completion_whose_outcome_is_unknown_is_sent_again_and_counted_once(fault):
    hive, storage, hooks = faulty_hive()
    async with hive:
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n} for n in range(5)])
        storage.plan["complete"] = [fault, fault]  # the first send and the first repeat
        code, tally, events, _ = await run(hive, "handlers:echo_async", batch=5)
        items = [await pool.get(i) for i in ids]
    assert [i.state for i in items] == [ItemState.DONE] * 5
    assert [i.result["n"] for i in items] == list(range(5)) and all(i.attempts == 1 for i in items)
    assert code == 0
    assert tally.done == 5 and ids_of(events, "done") == Counter(ids)  # each item counted once
    assert hooks.calls == Counter(("completed", i) for i in ids)  # and announced once to plugins
    assert storage.raised == [("complete", fault)] * 2


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", ["applied", "lost"])
@pytest.mark.parametrize(("do", "failed", "poisoned"), [("permanent", 0, 1), ("boom", 1, 1)])
async def test_a_failure_whose_outcome_is_unknown_is_sent_again_and_counted_once(fault, do, failed, poisoned):
    hive, storage, hooks = faulty_hive(max_attempts=2)
    async with hive:
        pool = hive.pool("jobs")
        item_id = await pool.push({"do": do})
        storage.plan["fail"] = [fault]  # the first failure; a retried "boom" fails again, unharmed
        code, tally, events, _ = await run(hive, "handlers:signals")
        item = await pool.get(item_id)
    assert storage.raised == [("fail", fault)]
    assert item.state is ItemState.POISONED and item.attempts == 1 + failed
    assert ("Permanent" if do == "permanent" else "transient boom") in item.error
    assert code == 0
    assert (tally.failed, tally.poisoned) == (failed, poisoned)
    assert ids_of(events, "failed") + ids_of(events, "poisoned") == Counter({item_id: failed + poisoned})
    assert hooks.calls == Counter({("failed", item_id): failed, ("poisoned", item_id): poisoned}) - Counter()


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", ["applied", "lost"])
async def test_a_release_whose_outcome_is_unknown_is_sent_again_and_counted_once(fault):
    hive, storage, _ = faulty_hive()
    async with hive:
        pool = hive.pool("jobs")
        item_id = await pool.push({"n": 7})
        storage.plan["release"] = [fault]
        code, tally, _, _ = await run(hive, "settle_handlers:rate_limited_once")
        item = await pool.get(item_id)
    assert storage.raised == [("release", fault)]
    assert item.state is ItemState.DONE and item.result == {"n": 7}
    assert (item.attempts, item.releases) == (1, 1)  # released once, its attempt refunded
    assert code == 0 and tally.released == 1 and tally.done == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", ["applied", "lost"])
async def test_a_stopping_worker_sends_its_unsettled_completion_before_deregistering(fault):
    """Stopped right as its completion fails, the worker tries it again before it deregisters.

    Deregistration gives back (refunds) what the worker still holds: a completion
    that was never applied would otherwise run again, and one that was would not
    be counted.
    """
    hive, storage, _ = faulty_hive()
    async with hive:
        pool = hive.pool("jobs")
        item_id = await pool.push({"n": 1})
        storage.plan["complete"] = [fault]

        def stop_on_fault(runtime: ProcessRuntime) -> None:
            storage.on_fault = lambda: runtime.request_stop(0, "stopped by the test")

        code, tally, events, _ = await run(hive, "handlers:echo_async", started=stop_on_fault)
        item = await pool.get(item_id)
    assert storage.raised == [("complete", fault)]
    assert item.state is ItemState.DONE and item.releases == 0
    assert code == 0 and tally.done == 1 and ids_of(events, "done") == Counter([item_id])


@pytest.mark.asyncio
async def test_a_deregistration_whose_outcome_is_unknown_is_sent_again():
    """The claims a stopping worker never started go back even when its deregistration's answer is lost."""
    hive, storage, _ = faulty_hive()
    async with hive:
        pool = hive.pool("jobs")
        first, second = await pool.push_many([{"n": 1}, {"n": 2}])
        storage.plan["release_by_worker"] = ["lost"]

        def stop_at_first_start(runtime: ProcessRuntime, event: list[Any]) -> None:
            if event[0] == "start":
                runtime.request_stop(0, "stopped by the test")  # the batch's second claim never starts

        code, tally, _, runtime = await run(hive, "handlers:echo_async", batch=2, on_event=stop_at_first_start)
        done, unstarted = await pool.get(first), await pool.get(second)
        record = await hive.workers.get(runtime.workers[0].worker_id)
    assert storage.raised == [("release_by_worker", "lost")]
    assert done.state is ItemState.DONE
    assert unstarted.state is ItemState.PENDING and (unstarted.attempts, unstarted.releases) == (0, 1)
    assert record.status is workhive.WorkerStatus.STOPPED
    assert code == 0 and tally.released == 1


@pytest.mark.asyncio
async def test_items_a_claim_took_unseen_are_given_back_then_run():
    """A claim whose answer is lost may hold items under the worker's id, which its heartbeat would renew forever."""
    hive, storage, _ = faulty_hive()
    async with hive:
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n} for n in range(6)])
        storage.plan["claim"] = ["ok", "applied"]  # the second claim takes items 3 to 5; its answer is lost
        code, tally, events, _ = await run(hive, "handlers:echo_async", batch=3)
        items = [await pool.get(i) for i in ids]
    assert [i.state for i in items] == [ItemState.DONE] * 6
    assert [(i.attempts, i.releases) for i in items] == [(1, 0)] * 3 + [(1, 1)] * 3  # given back unspent, run once
    assert code == 0 and tally.done == 6 and tally.released == 3
    assert ids_of(events, "done") == Counter(ids)
    assert storage.raised == [("claim", "applied")]


@pytest.mark.asyncio
async def test_a_result_the_store_refuses_fails_its_item_and_the_rest_of_the_batch_completes():
    """A refused value (nothing written) fails that item with the store's reason; the others complete."""
    hive, storage, _ = faulty_hive(max_attempts=1)
    async with hive:
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": n} for n in range(4)])
        storage.plan["complete"] = ["invalid*"]
        storage.only = {ids[2]}
        code, tally, events, _ = await run(hive, "handlers:echo_async", batch=4)
        items = [await pool.get(i) for i in ids]
    assert [i.state for i in items] == [ItemState.DONE] * 2 + [ItemState.POISONED, ItemState.DONE]
    assert "too large for this store" in items[2].error
    assert code == 0 and tally.done == 3 and tally.poisoned == 1
    assert ids_of(events, "done") == Counter(ids[:2] + ids[3:])


@pytest.mark.asyncio
async def test_a_completion_storage_never_answers_is_no_longer_heartbeaten(monkeypatch):
    """After the worker's storage-fault budget, its claims are left to expire; the other items in flight still finish.

    The process's one worker holds two items (their handlers wait for the test). The
    first item's completion then always fails; once the worker has spent its budget
    (the process stops, with the fault as its reason), the process's heartbeat loop
    goes round and never beats again: a heartbeat renews every lease of the worker,
    the unanswered claim's too. The other item still completes within its lease, and
    at exit the unanswered claim is given back.
    """
    import settle_handlers

    from workhive.runtime import worker as worker_module

    monkeypatch.setattr(worker_module, "MAX_STORAGE_FAULTS", 3)  # the mechanism, not the patience
    monkeypatch.setattr(worker_module, "CLAIM_RETRY_MAX", 0.001)
    gates = settle_handlers.gates = {"stuck": asyncio.Event(), "running": asyncio.Event()}
    hive, storage, _ = faulty_hive()
    async with hive:
        pool = hive.pool("jobs")
        stuck, running = await pool.push_many([{"n": 0, "gate": "stuck"}, {"n": 1, "gate": "running"}])
        storage.plan["complete"] = ["lost*"]
        storage.only = {stuck}
        holder: dict[str, str] = {}  # item id -> the lane that started it
        gave_up_at: list[int] = []  # how many heartbeats there were when the process said it stops
        rounds_since: list[int] = []  # heartbeat-loop rounds since then
        enough = asyncio.Event()

        def watch(runtime: ProcessRuntime, event: list[Any]) -> None:
            if event[0] in ("start", "starts"):
                if event[0] == "start":
                    holder[event[2]] = event[1]
                else:  # lanes' first claims announced together: worker id, then lane, item id, token each
                    holder.update({event[n + 1]: f"{event[1]}#{event[n]}" for n in range(2, len(event), 3)})
                if len(holder) == 2:  # both running: now the first one may finish, and fail to
                    gates["stuck"].set()
            elif event[0] == "fatal":
                gave_up_at.append(len(storage.heartbeats))
            elif event[0] == "ran_dry" and storage.raised:
                enough.set()  # the worker went back to claiming after the fault: nothing more to wait for (a failure)

        def started(runtime: ProcessRuntime) -> None:
            publish = runtime.counts.publish_soon

            def one_round() -> None:  # the heartbeat loop calls it once a round, before its beats
                if gave_up_at:
                    rounds_since.append(len(storage.heartbeats))
                    if len(rounds_since) >= 4:  # three whole rounds since it gave up
                        enough.set()
                publish()

            runtime.counts.publish_soon = one_round  # type: ignore[method-assign]

        task = asyncio.ensure_future(
            run(
                hive,
                "settle_handlers:gated",
                stop_when_ran_dry=False,
                on_event=watch,
                started=started,
                concurrency=2,
                grace=RUN_BOUND,
            )
        )
        try:
            await asyncio.wait_for(enough.wait(), RUN_BOUND)
        finally:
            gates["stuck"].set()
            gates["running"].set()
            code, tally, events, _ = await task
        items = {i: await pool.get(i) for i in (stuck, running)}
    assert gave_up_at, "the worker went back to claiming instead of settling its claim"
    assert holder[stuck] != holder[running] and len(rounds_since) >= 4
    assert storage.heartbeats[gave_up_at[0] :] == []  # rounds went by, and not one beat since it gave up
    assert code == ExitCode.FAILURE
    assert "the test's fault" in next(e for e in events if e[0] == "fatal")[2]
    assert items[running].state is ItemState.DONE and tally.done == 1
    # Deregistration gave the unanswered claim back, its attempt refunded: nothing lost.
    assert items[stuck].state is ItemState.PENDING and items[stuck].attempts == 0
