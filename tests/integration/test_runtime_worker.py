"""One worker process's runtime, in-process on the memory backend: context and error mapping."""

from __future__ import annotations

import pytest

import workhive
from workhive.models import ItemState
from workhive.runtime.events import ListSink, Tally
from workhive.runtime.health import HealthPolicy
from workhive.runtime.options import ExitCode, FleetOptions
from workhive.runtime.process import ProcessRuntime

pytest.importorskip("workhive_memory")
pytestmark = pytest.mark.usefixtures("handlers_on_path")  # the fixture is in conftest.py


async def run_until_empty(hive, handler: str, *, health: HealthPolicy | None = None, **options):
    opts = FleetOptions(pool="jobs", handler=handler, storage="memory://", heartbeat=0.2, lease=5.0, **options)
    sink = ListSink()
    runtime = ProcessRuntime(opts, hive=hive, sink=sink, health_policy=health)
    code = await runtime.run(stop_when_empty=True)
    tally = Tally()
    for event in sink.events:
        tally.apply(event)
    return code, tally, runtime


@pytest.mark.asyncio
@pytest.mark.parametrize("handler", ["handlers:echo_sync", "handlers:echo_async"])
async def test_handlers_get_the_context_and_their_results_are_kept(handler):
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"n": i} for i in range(20)])
        code, tally, runtime = await run_until_empty(hive, handler, concurrency=3)
        assert code == 0 and tally.done == 20 and tally.failed == 0
        workers = {w.worker_id for w in runtime.workers}
        for n, item_id in enumerate(ids):
            item = await pool.get(item_id)
            assert item.state is ItemState.DONE
            assert item.result["n"] == n and item.result["attempt"] == 1
            assert item.result["worker"] in workers
            assert item.result["sync"] is (handler == "handlers:echo_sync")
        # every worker deregistered on the way out
        records = [await hive.workers.get(w) for w in workers]
        assert {r.status for r in records} == {workhive.WorkerStatus.STOPPED}


@pytest.mark.asyncio
async def test_error_mapping_for_each_handler_signal():
    async with workhive.open("memory://", max_attempts=3) as hive:
        pool = hive.pool("jobs")
        ids = dict(
            zip(
                ["ok", "permanent", "boom", "bad_result", "rate_limit", "rate_limit_once"],
                await pool.push_many(
                    [{"do": d} for d in ["ok", "permanent", "boom", "bad_result", "rate_limit", "rate_limit_once"]]
                ),
            )
        )
        code, tally, _ = await run_until_empty(
            hive, "handlers:signals", max_rate_limit_retries=4, health=HealthPolicy(failures_before_pause=100)
        )
        assert code == 0
        ok = await pool.get(ids["ok"])
        assert ok.state is ItemState.DONE and ok.result == {"ok": "ok", "credential": None}
        # Permanent: poisoned on its first attempt
        permanent = await pool.get(ids["permanent"])
        assert permanent.state is ItemState.POISONED and permanent.attempts == 1
        assert "Permanent: this input can never work" in permanent.error
        # any other exception: retried with backoff until max_attempts, then poisoned
        boom = await pool.get(ids["boom"])
        assert boom.state is ItemState.POISONED and boom.attempts == 3 and "RuntimeError: transient boom" in boom.error
        bad = await pool.get(ids["bad_result"])
        assert bad.state is ItemState.POISONED and "JSON-serialisable" in bad.error
        # RateLimited: released without spending attempts, max_rate_limit_retries times, then failed normally
        limited = await pool.get(ids["rate_limit"])
        assert limited.releases == 4 and limited.state is ItemState.POISONED
        assert limited.attempts == 3
        once = await pool.get(ids["rate_limit_once"])
        assert once.state is ItemState.DONE and once.attempts == 1 and once.releases == 1
        assert tally.done == 2 and tally.poisoned == 4
        assert tally.rate_limited == {"-": 4 + 3 + 1}
        assert tally.released == 4 + 1


@pytest.mark.asyncio
async def test_auth_failed_without_credentials_fails_the_item():
    async with workhive.open("memory://", max_attempts=2) as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push({"do": "auth"})
        code, tally, _ = await run_until_empty(hive, "handlers:signals")
        item = await pool.get(item_id)
        assert code == 0 and item.state is ItemState.POISONED and "401 from the test API" in item.error
        assert tally.failed == 1 and tally.poisoned == 1


@pytest.mark.asyncio
async def test_auth_failed_disables_the_credential_and_retries_with_another(monkeypatch):
    pytest.importorskip("workhive_env_credentials")
    monkeypatch.setenv("RTKEY_1", "sk-one")
    monkeypatch.setenv("RTKEY_2", "sk-two")
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        ids = await pool.push_many([{"bad": "RTKEY_1"} for _ in range(6)])
        code, tally, runtime = await run_until_empty(hive, "handlers:auth_for", credentials=("env:RTKEY",))
        assert code == 0 and tally.done == 6
        items = [await pool.get(i) for i in ids]
        assert {i.result["credential"] for i in items} == {"RTKEY_2"}
        assert all(i.attempts == 1 for i in items)  # the refused try did not spend an attempt
        assert sum(i.releases for i in items) == 1 == tally.released
        assert tally.disabled == {"RTKEY_1": "401 for RTKEY_1"}
        assert {s.name: s.state for s in runtime.credentials.snapshot()} == {
            "RTKEY_1": "disabled",
            "RTKEY_2": "available",
        }


@pytest.mark.asyncio
async def test_every_credential_disabled_stops_the_process_with_failure(monkeypatch):
    pytest.importorskip("workhive_env_credentials")
    monkeypatch.setenv("RTKEY_1", "sk-one")
    monkeypatch.setenv("RTKEY_2", "sk-two")
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        item_id = await pool.push({"do": "auth"})
        code, tally, _ = await run_until_empty(hive, "handlers:signals", credentials=("env:RTKEY",))
        assert code == ExitCode.FAILURE
        assert set(tally.disabled) == {"RTKEY_1", "RTKEY_2"}
        item = await pool.get(item_id)
        assert item.state is ItemState.PENDING and item.attempts == 0  # handed back unspent


@pytest.mark.asyncio
async def test_unhealthy_worker_stops_the_process_for_replacement():
    async with workhive.open("memory://", max_attempts=50) as hive:
        pool = hive.pool("jobs")
        await pool.push_many([{"do": "boom"} for _ in range(50)])
        policy = HealthPolicy(failures_before_pause=2, pause=0.01, max_pause=0.02, recovery_pauses=2)
        code, tally, _ = await run_until_empty(hive, "handlers:signals", health=policy, backoff="none")
        from workhive.runtime.shared import EXIT_UNHEALTHY

        assert code == EXIT_UNHEALTHY
        # 2 failures before each of 2 pauses, then 2 more exhaust the budget
        assert tally.failed == 6
        stats = await pool.stats()
        assert stats.claimed == 0  # nothing left held by the stopped worker


@pytest.mark.asyncio
async def test_context_lock_is_a_fleet_wide_named_lock():
    from workhive.runtime.context import HandlerContext

    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        await pool.push({"n": 1})
        item = await pool.claim("w1")
        ctx = HandlerContext(item=item, pool=pool, hive=hive, worker_id="w1")
        assert ctx.data == {"n": 1} and ctx.attempt == 1 and ctx.credential is None
        async with ctx.lock("resource:a", ttl=5) as first:
            pass
        async with ctx.lock("resource:a", ttl=5) as second:
            assert second.token > first.token
        assert "item=" in repr(ctx)


@pytest.mark.asyncio
async def test_a_worker_runs_its_item_without_waiting_for_its_status_to_be_written():
    import asyncio

    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        [item_id] = await pool.push_many([{"n": 1}])
        gate = asyncio.Event()
        written: list[workhive.WorkerStatus] = []
        real = hive.workers.update_status

        async def held_status(worker_id, status, detail=None):  # a registry that answers late
            await gate.wait()
            written.append(status)
            await real(worker_id, status, detail)

        hive.workers.update_status = held_status  # type: ignore[method-assign]
        opts = FleetOptions(pool="jobs", handler="handlers:echo_async", storage="memory://", heartbeat=0.2, lease=5.0)
        runtime = ProcessRuntime(opts, hive=hive, sink=ListSink())
        run = asyncio.create_task(runtime.run(stop_when_empty=True))
        for _ in range(3000):  # the item finishes while no status write has landed
            if (await pool.get(item_id)).state is ItemState.DONE:
                break
            await asyncio.sleep(0.01)
        assert (await pool.get(item_id)).state is ItemState.DONE
        assert written == []
        gate.set()
        assert await asyncio.wait_for(run, 60) == 0
        # in order, the wishes that piled up while one was in flight coalesced to the latest
        assert written == [workhive.WorkerStatus.BUSY, workhive.WorkerStatus.IDLE]
        [worker] = runtime.workers
        assert (await hive.workers.get(worker.worker_id)).status is workhive.WorkerStatus.STOPPED


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["system_exit", "keyboard_interrupt"])
async def test_an_async_handler_that_ends_its_process_charges_its_item_and_stops_the_process(monkeypatch, how):
    monkeypatch.setenv("WORKHIVE_TEST_HOW", how)
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        [bad_id] = await pool.push_many([{"n": 0, "bad": True}])
        code, tally, runtime = await run_until_empty(hive, "crash_handlers:ends_its_process_async", max_attempts=3)
        # The exception stopped this process (its supervisor starts another), not the event loop.
        assert code == ExitCode.FAILURE
        name = "SystemExit" if how == "system_exit" else "KeyboardInterrupt"
        assert runtime.exit.reason == f"the handler raised {name} on item {bad_id}"
        bad = await pool.get(bad_id)
        assert bad.state is ItemState.PENDING and bad.attempts == 1  # the attempt is spent, not given back
        said = "SystemExit: fatal: key no-key" if how == "system_exit" else "KeyboardInterrupt: giving up"
        assert f"its worker process exited with {said}" in bad.error
        assert tally.failed == 1 and tally.released == 0
        records = [await hive.workers.get(w.worker_id) for w in runtime.workers]
        assert {r.status for r in records} == {workhive.WorkerStatus.STOPPED}  # deregistered on the way out
