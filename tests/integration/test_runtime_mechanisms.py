"""Runtime mechanisms that need a storage backend (memory), tested in-process without timing."""

from __future__ import annotations

import asyncio
import contextlib
import re
from types import SimpleNamespace

import pytest

from workhive.runtime import FleetOptions, FleetProgress, format_line
from workhive.runtime.events import ListSink

pytest.importorskip("workhive_memory")


class TestLazyRegistration:
    def test_the_process_is_ready_after_one_registration_whatever_the_concurrency(self):
        import workhive
        from workhive.runtime.process import ProcessRuntime

        async def main() -> list[list]:
            async with workhive.open("memory://") as hive:
                sink = ListSink()
                runtime = ProcessRuntime(
                    FleetOptions(pool="jobs", handler="json:dumps", concurrency=200), hive=hive, sink=sink
                )
                original = runtime.emit

                def emit(*event):
                    original(*event)
                    if event[0] == "ready":
                        runtime.request_stop(0, "test")

                runtime.emit = emit
                await runtime.run()
                return sink.events

        events = asyncio.run(main())
        before_ready = events[: [e[0] for e in events].index("ready")]
        assert [e[0] for e in before_ready] == ["worker"]  # one row written before the process is ready


class TestSupervisorProgress:
    def _supervisor(self, seen):
        import workhive
        from workhive.runtime.supervisor import Supervisor

        hive = workhive.open("memory://")
        return Supervisor(FleetOptions(pool="jobs", handler="m:f", processes=1), hive, seen.append)

    def test_counts_come_from_one_snapshot_and_add_up(self):
        from workhive.models import PoolStats

        seen: list[FleetProgress] = []
        sup = self._supervisor(seen)
        sup._baseline = PoolStats("jobs", pending=2000, delayed=0, claimed=0, done=50, poisoned=1)
        sup.stats = PoolStats("jobs", pending=1130, delayed=3, claimed=4, done=900, poisoned=14)
        sup.tally.done = 800  # events lag storage: they must not skew what the line adds up to
        sup._progress()
        [p] = seen
        assert (p.done, p.poisoned) == (850, 13)
        assert p.done + p.poisoned + p.remaining == 2000

    def test_a_short_run_reports_its_average_rate_not_zero(self):
        from workhive.models import PoolStats

        seen: list[FleetProgress] = []
        sup = self._supervisor(seen)
        sup._baseline = PoolStats("jobs", pending=10, delayed=0, claimed=0, done=0, poisoned=0)
        sup.stats = PoolStats("jobs", pending=0, delayed=0, claimed=0, done=10, poisoned=0)
        sup._progress(final=True)
        assert seen[-1].rate > 0
        # The rate field as rendered: a run this short must not print "0.0/s". A substring check
        # is not enough, since a large rate such as "178050.0/s" also contains "0.0/s".
        [shown] = re.findall(r"\| ([0-9.]+)/s", format_line(seen[-1]))
        assert float(shown) > 0

    def test_the_last_error_of_a_failing_item_is_shown(self):
        seen: list[FleetProgress] = []
        sup = self._supervisor(seen)
        child = SimpleNamespace(unreported={})  # the one piece of a child's bookkeeping a FAILED event touches
        sup._on_event(child, ["failed", 1, "i0000000000000007", "RuntimeError: upstream said\nno"])
        sup._progress()
        assert seen[-1].last_errors == {"i0000000000000007": "RuntimeError: upstream said\nno"}
        assert "last error i0000000000000007: RuntimeError: upstream said no" in format_line(seen[-1])


class TestSupervisorEventPipe:
    """A child writes an event per item; the supervisor reads them in bursts, not once per write."""

    @pytest.mark.asyncio
    async def test_after_a_read_the_pipe_goes_unwatched_until_the_pause_is_over(self, monkeypatch):
        import json
        import os

        import workhive
        from workhive.runtime import supervisor as sup_module

        monkeypatch.setattr(sup_module, "EVENT_READ_PAUSE", 3600)  # the pause never ends by itself here
        hive = workhive.open("memory://")
        sup = sup_module.Supervisor(FleetOptions(pool="jobs", handler="m:f", processes=1), hive, None)
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        child = sup_module._Child(proc=SimpleNamespace(pid=4242), fd=read_fd, started_at=0.0)
        sup.children[4242] = child
        loop = asyncio.get_running_loop()

        def start(n):
            os.write(write_fd, (json.dumps(["start", "w", f"i{n}", n, 0]) + "\n").encode())

        async def spin():
            for _ in range(20):
                await asyncio.sleep(0)

        try:
            loop.add_reader(read_fd, sup._on_readable, child)
            start(1)
            await spin()
            assert child.unreported == {"i1": 1}
            start(2)  # written during the pause: waits in the pipe, nothing wakes the supervisor
            await spin()
            assert child.unreported == {"i1": 1}
            sup._watch_again(child)  # the pause is over
            await spin()
            assert child.unreported == {"i1": 1, "i2": 2}
            del sup.children[4242]  # reaped during a pause: its descriptor is not watched again
            loop.remove_reader(read_fd)
            sup._watch_again(child)
            assert not loop.remove_reader(read_fd)
        finally:
            loop.remove_reader(read_fd)
            os.close(read_fd)
            os.close(write_fd)


@pytest.mark.parametrize("fault", ["StorageError", "StorageCorrupt"])
def test_claims_that_keep_failing_stop_the_process_with_one_reason(monkeypatch, caplog, fault):
    import workhive
    import workhive.errors as errors
    from workhive.runtime import worker as worker_module
    from workhive.runtime.health import HealthPolicy
    from workhive.runtime.process import ProcessRuntime

    monkeypatch.setattr(worker_module, "CLAIM_RETRY_MAX", 0.001)  # the mechanism, not the patience
    calls = []

    class FullDisk:
        def __init__(self, pool):
            self._pool = pool

        def __getattr__(self, name):
            return getattr(self._pool, name)

        async def claim_many(self, *args, **kwargs):
            calls.append(1)
            raise getattr(errors, fault)("database or disk is full (the test's fault)")

    async def main():
        async with workhive.open("memory://") as hive:
            await hive.pool("jobs").push({"n": 1})
            sink = ListSink()
            runtime = ProcessRuntime(
                FleetOptions(pool="jobs", handler="json:dumps", concurrency=1),
                hive=hive,
                sink=sink,
                health_policy=HealthPolicy(pause=0.001, max_pause=0.001),
            )
            runtime.pool = FullDisk(runtime.pool)
            code = await asyncio.wait_for(runtime.run(), 60)
            return code, sink.events, (await hive.pool("jobs").stats()).pending

    with caplog.at_level("WARNING", logger="workhive.runtime.worker"):
        code, events, pending = asyncio.run(main())
    assert code == 1
    fatal = [e for e in events if e[0] == "fatal"]
    assert len(fatal) == 1 and "the test's fault" in fatal[0][2]
    assert len(calls) == (1 if fault == "StorageCorrupt" else worker_module.MAX_STORAGE_FAULTS)
    assert len([r for r in caplog.records if "claim failed" in r.getMessage()]) == 1  # one warning, not one a try
    assert pending == 1  # nothing lost


def test_a_claim_started_alone_is_the_culprit_even_beside_unacknowledged_ones():
    import subprocess
    import sys

    import workhive
    from workhive.models import ItemState
    from workhive.runtime.supervisor import Supervisor, _Child

    proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)  # the child that died
    proc.wait()

    async def main():
        async with workhive.open("memory://") as hive:
            pool = hive.pool("jobs")
            await pool.push_many([{"n": 1}, {"n": 2}])
            done_early = await hive.workers.register(pools=["jobs"])
            suspect = await hive.workers.register(pools=["jobs"])
            finished = await pool.claim(done_early.worker_id)  # its handler returned; the ack is not sent yet
            alone = await pool.claim(suspect.worker_id)
            sup = Supervisor(FleetOptions(pool="jobs", handler="m:f", processes=1, max_attempts=3), hive, None)
            child = _Child(proc=proc, fd=-1, started_at=0.0, ready=True)
            child.worker_ids = {done_early.worker_id, suspect.worker_id}
            sup._on_event(child, ["start", done_early.worker_id, finished.id, finished.token, 0])
            sup._on_event(child, ["start", suspect.worker_id, alone.id, alone.token, 1])
            sup.stopping = True  # no replacement is started by this test
            await sup._on_child_exit(child, -9)
            proc.stdin.close()
            return await pool.get(finished.id), await pool.get(alone.id)

    innocent, culprit = asyncio.run(main())
    assert innocent.state is ItemState.PENDING and innocent.attempts == 0  # refunded
    assert culprit.attempts == 1 and "alone" in culprit.error  # spent, with the reason


@pytest.mark.usefixtures("handlers_on_path")
class TestRanDry:
    """With --until-empty the run ends when the last item does, not at the next periodic count."""

    @staticmethod
    async def _events_until_first_empty_claim(monkeypatch, items: int) -> list[list]:
        """Run one process's workers on ``items`` no-op items and stop it after its first empty claim."""
        import workhive
        from workhive.runtime.process import ProcessRuntime

        async with workhive.open("memory://") as hive:
            if items:
                await hive.pool("jobs").push_many([{"n": n} for n in range(items)])
            sink = ListSink()
            runtime = ProcessRuntime(FleetOptions(pool="jobs", handler="handlers:noop"), hive=hive, sink=sink)
            claim_many = type(runtime.pool).claim_many

            async def claim_then_stop_when_empty(self, *args, **kwargs):
                claimed = await claim_many(self, *args, **kwargs)
                if not claimed:
                    # Stopped from the loop's next pass: the worker finishes this claim's handling first.
                    asyncio.get_running_loop().call_soon(runtime.request_stop, 0, "test")
                return claimed

            monkeypatch.setattr(type(runtime.pool), "claim_many", claim_then_stop_when_empty)
            await asyncio.wait_for(runtime.run(), 30)
            return sink.events

    def test_a_worker_says_once_when_its_claims_start_coming_back_empty(self, monkeypatch):
        kinds = [e[0] for e in asyncio.run(self._events_until_first_empty_claim(monkeypatch, 5))]
        assert kinds.count("ran_dry") == 1
        assert kinds.index("ran_dry") > max(i for i, k in enumerate(kinds) if k == "done")

    def test_a_worker_that_never_found_work_says_nothing(self, monkeypatch):
        kinds = [e[0] for e in asyncio.run(self._events_until_first_empty_claim(monkeypatch, 0))]
        assert "ran_dry" not in kinds

    @pytest.mark.asyncio
    @pytest.mark.parametrize("until_empty", [True, False])
    async def test_ran_dry_brings_the_next_count_forward_only_for_until_empty(self, monkeypatch, until_empty):
        import workhive
        from workhive.runtime import supervisor as sup_module
        from workhive.runtime.options import ExitCode

        # The periodic read never comes again after the first: only RAN_DRY can end the run.
        monkeypatch.setattr(sup_module, "STATS_EVERY", 3600.0)
        monkeypatch.setattr(sup_module.Supervisor, "_spawn", lambda self: None)
        async with workhive.open("memory://") as hive:
            pool = hive.pool("jobs")
            await pool.push({"n": 1})
            [item] = await pool.claim_many(1, "w1", lease=60)
            reads = 0
            first_read = asyncio.Event()
            original = type(pool).stats

            async def counted(self):
                nonlocal reads
                stats = await original(self)
                reads += 1
                first_read.set()
                return stats

            monkeypatch.setattr(type(pool), "stats", counted)
            options = FleetOptions(pool="jobs", handler="m:f", processes=1, until_empty=until_empty)
            sup = sup_module.Supervisor(options, hive, None)
            loop = asyncio.create_task(sup._loop())
            try:
                await asyncio.wait_for(first_read.wait(), 30)  # on the loop's first pass
                assert reads == 1 and sup.stats is not None and sup.stats.claimed == 1
                await pool.complete(item)
                await asyncio.sleep(0.2)  # several loop passes: nothing reads the pool again
                assert reads == 1 and sup.result is None
                sup._on_event(SimpleNamespace(unreported={}), ["ran_dry", "w1"])
                if until_empty:
                    await asyncio.wait_for(asyncio.shield(loop), 30)
                    assert reads == 2
                    assert sup.result == (ExitCode.DRAINED, "the pool drained")
                else:
                    await asyncio.sleep(0.2)
                    assert reads == 1 and sup.result is None and not loop.done()
            finally:
                loop.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop

    @pytest.mark.asyncio
    async def test_an_early_read_waits_out_its_cost_unless_items_finished_since_the_last_read_began(self):
        import workhive
        from workhive.runtime import supervisor as sup_module

        async with workhive.open("memory://") as hive:
            options = FleetOptions(pool="jobs", handler="m:f", processes=1, until_empty=True)
            sup = sup_module.Supervisor(options, hive, None)
            # The last read began with 3 items settled here; the next early read is due at 10, or at 2
            # when that read may have counted items that finished since (it took 1 s, at 1).
            sup._settled_at_read, sup._early_read_at, sup._stale_read_at = 3, 10.0, 2.0
            sup.tally.done = 3
            assert not sup._early_read_due(20.0), "no worker ran dry: the periodic reads only"
            sup._ran_dry = True
            assert [sup._early_read_due(t) for t in (1.0, 5.0, 10.0)] == [False, False, True]
            sup.tally.released = 1  # one more item settled since the read began
            assert [sup._early_read_due(t) for t in (1.0, 2.0, 5.0)] == [False, True, True]
            assert 0.0 <= sup._pause() <= sup_module.TICK

    @pytest.mark.asyncio
    async def test_the_read_that_finds_the_pool_drained_is_the_runs_last(self, monkeypatch):
        import workhive
        from workhive.runtime import supervisor as sup_module

        monkeypatch.setattr(sup_module.Supervisor, "_spawn", lambda self: None)
        async with workhive.open("memory://") as hive:
            pool = hive.pool("jobs")
            await pool.push({"n": 1})
            await pool.complete(await pool.claim("w1"))
            reads = 0
            original = type(pool).stats

            async def counted(self):
                nonlocal reads
                reads += 1
                return await original(self)

            monkeypatch.setattr(type(pool), "stats", counted)
            options = FleetOptions(pool="jobs", handler="m:f", processes=1, until_empty=True, progress="none")
            report = await asyncio.wait_for(sup_module.Supervisor(options, hive, None).run(), 30)
            assert report.reason == "the pool drained"
            assert reads == 1, "the drained pool was counted once, not once more as the run ended"


# A memory hive: the core env has no storage plugin, so this lives with the integration tests.
class TestSuspects:
    """A worker runs a crash suspect alone through the gate, and clears it when its process lived."""

    def test_a_suspect_runs_alone_and_is_cleared_only_when_its_block_ends_normally(self):
        import workhive
        from workhive.runtime.isolation import SUSPECTS, IsolationGate, Suspects, suspect_key

        async def main() -> None:
            async with workhive.open("memory://") as hive:
                pool, store = hive.pool("jobs"), hive.shared(SUSPECTS)
                suspects, gate = Suspects(store, "jobs"), IsolationGate()
                plain, s1, s2 = [await pool.push({"n": n}) for n in range(3)]
                # Suspects were given back once (the supervisor refunds them): claim, release, claim again.
                for item in [await pool.claim("w1") for _ in range(3)]:
                    await pool.release(item)
                assert all([await pool.claim("w1") for _ in range(3)])
                for item_id in (s1, s2):
                    await store.put(suspect_key("jobs", item_id), True)
                async with suspects.admit(gate, await pool.get(plain)) as alone:
                    assert alone is False and not gate.exclusive_wanted
                async with suspects.admit(gate, await pool.get(s1)) as alone:
                    assert alone is True and gate.exclusive_wanted
                assert await store.get(suspect_key("jobs", s1)) is None, "ran alone and lived: cleared"
                with pytest.raises(RuntimeError):
                    async with suspects.admit(gate, await pool.get(s2)):
                        raise RuntimeError("not finished")
                assert await store.get(suspect_key("jobs", s2)) is True, "did not finish: still a suspect"
                assert not gate.exclusive_wanted and gate.running == 0

        asyncio.run(main())
