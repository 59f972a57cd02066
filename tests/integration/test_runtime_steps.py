"""Durable steps (``ctx.step``) in a worker's runtime, in-process on the memory backend.

A step's result is stored with the item under the claim's token; a later
claim replays it without calling the step's function. Sync handlers (run in
the process's thread pool) and async ones behave alike.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest

import workhive
from workhive.errors import InvalidArgument, LeaseLost, Permanent, StepsUnsupported
from workhive.models import ItemState
from workhive.runtime.context import HandlerContext
from workhive.runtime.events import ListSink
from workhive.runtime.health import HealthPolicy
from workhive.runtime.options import FleetOptions
from workhive.runtime.process import ProcessRuntime
from workhive.testing import ManualClock

pytest.importorskip("workhive_memory")
pytestmark = pytest.mark.usefixtures("handlers_on_path")  # the fixture is in conftest.py


@pytest.fixture
def calls() -> Any:
    import step_handlers

    step_handlers.CALLS.clear()
    return step_handlers.CALLS


async def run_until_empty(hive: workhive.Hive, handler: str, **options: Any) -> int:
    opts = FleetOptions(pool="jobs", handler=handler, storage="memory://", heartbeat=0.2, lease=5.0, **options)
    runtime = ProcessRuntime(opts, hive=hive, sink=ListSink(), health_policy=HealthPolicy(failures_before_pause=1000))
    return await runtime.run(stop_when_empty=True)


@pytest.mark.asyncio
@pytest.mark.parametrize("handler", ["step_handlers:three_steps_sync", "step_handlers:three_steps_async"])
async def test_a_retried_item_replays_its_stored_steps_and_calls_only_the_rest(handler: str, calls: Any) -> None:
    async with workhive.open("memory://", max_attempts=3) as hive:
        pool = hive.pool("jobs")
        failing, plain = await pool.push_many([{"name": "a", "q": "x", "fail_once": True}, {"name": "b", "q": "y"}])
        assert await run_until_empty(hive, handler, concurrency=2) == 0
        item = await pool.get(failing)
        assert item.state is ItemState.DONE and item.attempts == 2
        assert item.result["draft"] == "text of x / text of X"
        # Attempt 1 made search and both reads, then failed; attempt 2 replayed them and made only the draft.
        assert {k: n for (name, k), n in calls.items() if name == "a"} == {
            "search": 1,
            "read-x": 1,
            "read-X": 1,
            "draft": 1,
        }
        steps = await pool.steps(failing)
        assert [s.key for s in steps] == ["search", "read-x", "read-X", "draft"]
        assert [s.token for s in steps] == [1, 1, 1, 2]  # the first claim's steps, then the second's
        assert steps[0].value == {"hits": ["x", "X"]} and not any(s.failed for s in steps)
        other = await pool.get(plain)
        assert other.state is ItemState.DONE and other.attempts == 1
        # step_key: stable for the item, another for another item
        assert item.result["key"] == HandlerContext(item=item, pool=pool, hive=hive, worker_id="w").step_key("draft")
        assert other.result["key"] != item.result["key"]


@pytest.mark.asyncio
async def test_a_permanent_step_is_stored_and_raised_again_until_requeued_fresh(calls: Any) -> None:
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push({"name": "p"})
        assert await run_until_empty(hive, "step_handlers:permanent_step") == 0
        item = await pool.get(item_id)
        assert item.state is ItemState.POISONED and item.attempts == 1
        assert "the input names no document" in (item.error or "")
        steps = await pool.steps(item_id)
        assert [(s.key, s.failed) for s in steps] == [("search", False), ("check", True)]
        assert "Permanent: the input names no document" in steps[1].value
        # requeue keeps the steps: the failure is raised again without calling the step
        assert await pool.requeue([item_id]) == 1
        assert await run_until_empty(hive, "step_handlers:permanent_step") == 0
        again = await pool.get(item_id)
        assert again.state is ItemState.POISONED and "failed permanently on an earlier attempt" in (again.error or "")
        assert calls["p", "check"] == 1 and calls["p", "search"] == 1
        # requeue --fresh forgets them: every step runs again
        assert await pool.requeue([item_id], fresh=True) == 1
        assert await pool.steps(item_id) == []
        assert await run_until_empty(hive, "step_handlers:permanent_step") == 0
        assert calls["p", "check"] == 2 and calls["p", "search"] == 2


@pytest.mark.asyncio
async def test_bad_step_use_fails_the_item_with_what_to_do_and_stores_nothing(calls: Any) -> None:
    async with workhive.open("memory://", max_attempts=1) as hive:
        pool = hive.pool("jobs")
        kinds = ["repeat", "not_json", "empty_key", "too_large"]
        ids = dict(zip(kinds, await pool.push_many([{"name": k, "do": k} for k in kinds])))
        assert await run_until_empty(hive, "step_handlers:bad_steps") == 0
        errors = {k: (await pool.get(i)).error or "" for k, i in ids.items()}
        assert "step key 'same' was used already" in errors["repeat"] and "own key" in errors["repeat"]
        assert "the result of step 'set'" in errors["not_json"]
        assert "must not be empty" in errors["empty_key"]
        assert "more than a step keeps" in errors["too_large"]
        assert [s.key for s in await pool.steps(ids["repeat"])] == ["same"]  # the first one stood
        for kind in ("not_json", "empty_key", "too_large"):
            assert await pool.steps(ids[kind]) == []


@pytest.mark.asyncio
async def test_a_step_that_failed_within_a_run_may_run_again_under_its_key(calls: Any) -> None:
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push({"name": "f"})
        assert await run_until_empty(hive, "step_handlers:retry_inside") == 0
        assert (await pool.get(item_id)).result == "ok"
        assert calls["f", "flaky"] == 2
        assert [(s.key, s.value) for s in await pool.steps(item_id)] == [("flaky", "ok")]


@attrs.define
class _WithoutSteps:
    """The memory backend without its step methods: a backend that predates the capability."""

    inner: object

    def __getattr__(self, name: str) -> object:
        if name.startswith("step_"):
            raise AttributeError(name)
        return getattr(self.inner, name)


@pytest.mark.asyncio
async def test_steps_on_a_backend_without_them_fail_the_item_naming_the_backend(calls: Any) -> None:
    from workhive_memory import MemoryStorage

    async with workhive.Hive(_WithoutSteps(MemoryStorage()), max_attempts=1) as hive:  # type: ignore[arg-type]
        pool = hive.pool("jobs")
        item_id = await pool.push({"name": "u", "q": "x"})
        assert await run_until_empty(hive, "step_handlers:three_steps_async") == 0
        item = await pool.get(item_id)
        assert item.state is ItemState.POISONED
        assert "StepsUnsupported" in (item.error or "") and "_WithoutSteps keeps no durable steps" in item.error
        assert calls == {}  # the step's function was never called


@pytest.mark.asyncio
@pytest.mark.parametrize("form", ["async", "sync"])
async def test_a_stale_claim_cannot_store_a_step_and_learns_it_lost_the_item(form: str) -> None:
    clock = ManualClock()
    async with workhive.open("memory://", clock=clock) as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push("x")
        stale = await pool.claim("w1", lease=10.0)
        assert stale is not None
        ctx = HandlerContext(item=stale, pool=pool, hive=hive, worker_id="w1")
        assert await _step(ctx, form, "first", lambda: 1) == 1
        clock.advance(15.0)
        current = await pool.claim("w2", lease=10.0)
        assert current is not None and current.id == item_id
        made: list[int] = []
        with pytest.raises(LeaseLost, match="claimed again"):
            await _step(ctx, form, "second", lambda: made.append(2) or 2)
        assert made == [2]  # the call was made (at least once), but its result is not kept
        assert [s.key for s in await pool.steps(item_id)] == ["first"]
        # The new claim replays "first" and runs "second" itself.
        ctx2 = HandlerContext(item=current, pool=pool, hive=hive, worker_id="w2")
        assert await _step(ctx2, form, "first", lambda: pytest.fail("replayed, not called")) == 1
        assert await _step(ctx2, form, "second", lambda: 22) == 22
        assert [(s.key, s.token) for s in await pool.steps(item_id)] == [("first", 1), ("second", 2)]


async def _step(ctx: HandlerContext, form: str, key: str, fn: Any) -> Any:
    if form == "async":
        return await ctx.step(key, fn)
    return await asyncio.to_thread(ctx.step, key, fn)  # a sync handler's thread: storage goes through the loop


@pytest.mark.asyncio
async def test_a_replayed_permanent_failure_raises_permanent_again() -> None:
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        await pool.push("x")
        first = await pool.claim("w1")
        assert first is not None
        ctx = HandlerContext(item=first, pool=pool, hive=hive, worker_id="w1")

        def refuse() -> None:
            raise Permanent("no such document")

        with pytest.raises(Permanent, match="no such document"):
            await ctx.step("check", refuse)
        with pytest.raises(InvalidArgument, match="used already"):
            await ctx.step("check", refuse)
        await pool.release(first)
        second = await pool.claim("w1")
        assert second is not None
        ctx = HandlerContext(item=second, pool=pool, hive=hive, worker_id="w1")
        with pytest.raises(Permanent, match="failed permanently on an earlier attempt: Permanent: no such document"):
            await ctx.step("check", lambda: pytest.fail("replayed, not called"))
        with pytest.raises(StepsUnsupported):
            from workhive.steps import steps_of

            steps_of("jobs", object())


def test_a_sigkilled_worker_process_resumes_its_item_at_the_step_it_did_not_finish(tmp_path: Any) -> None:
    """Through the CLI: the process dies holding the item after two steps; the next claim makes only the third."""
    import json
    import subprocess
    import sys

    from .conftest import fleet_env

    url = f"sqlite:///{tmp_path / 'hive.db'}"

    async def push() -> list[str]:
        async with workhive.open(url) as hive:
            return await hive.pool("jobs").push_many([{"name": "k", "kill": True}, {"name": "p"}])

    ids = asyncio.run(push())
    calls = tmp_path / "calls.txt"
    env = fleet_env(STEP_CALLS=str(calls))
    run = subprocess.run(
        [sys.executable, "-m", "workhive", "--storage", url, "work", "jobs", "--handler",
         "step_handlers:killed_mid_item", "--processes", "1", "--concurrency", "1", "--until-empty",
         "--progress", "none", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["done"] == 2
    lines = [line.split() for line in calls.read_text().splitlines()]
    killed = [(key, int(token)) for name, key, token in lines if name == "k"]
    # a and b under the first claim, then the process died; c alone under the next: nothing made twice.
    assert killed == [("a", 1), ("b", 1), ("c", 2)], killed
    assert [key for name, key, _ in lines if name == "p"] == ["a", "b", "c"]

    async def read() -> tuple[Any, list[Any]]:
        async with workhive.open(url, create=False) as hive:
            pool = hive.pool("jobs")
            return await pool.get(ids[0]), await pool.steps(ids[0])

    item, steps = asyncio.run(read())
    assert item.state is ItemState.DONE and item.result == ["a of k", "b of k", "c of k"]
    assert [(s.key, s.token) for s in steps] == [("a", 1), ("b", 1), ("c", 2)]
