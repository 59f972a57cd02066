"""A fleet whose storage dies: the stop waits on it once, a signal cuts that short, and no item is blamed.

In-process, on the memory backend behind a double that, once "dead", makes every storage call hang
(as a store past its retry window does) and counts it. The bound is checked by counting calls, not by
reading a clock: a call that never returns can only end by the supervisor giving up on it.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import subprocess
import sys
from typing import Any

import pytest

import workhive
from workhive.models import ItemState
from workhive.runtime import events as ev
from workhive.runtime.options import ExitCode, FleetOptions
from workhive.runtime.supervisor import Supervisor, _Child

pytest.importorskip("workhive_memory")

GUARD = 60.0  # seconds a step may take before the test calls it stuck


class DeadStore:
    """The memory backend, until ``dead``: then every async call is counted and never returns."""

    def __init__(self, inner: Any, retry_for: float) -> None:
        self._inner = inner
        self.retry_for = retry_for  # what the supervisor reads as the store's retry window
        self.dead = False
        self.calls: list[str] = []
        self.called = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not self.dead or not inspect.iscoroutinefunction(attr):
            return attr

        async def hang(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            self.called.set()
            await asyncio.Event().wait()

        return hang


def _dead_process() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
    proc.wait()
    assert proc.stdin is not None
    proc.stdin.close()
    return proc


async def _fleet(retry_for: float, *, children: int, workers: int = 2) -> tuple[Any, DeadStore, Supervisor, list]:
    """A hive with ``children`` dead processes' worth of claims, each of ``workers`` workers running one item."""
    hive = workhive.open("memory://")
    await hive.open()
    pool = hive.pool("jobs")
    await pool.push_many([{"n": n} for n in range(children * workers + 2)])
    store = DeadStore(hive.storage, retry_for)
    hive.storage = store
    sup = Supervisor(FleetOptions(pool="jobs", handler="json:dumps", processes=children), hive, None)
    dead = []
    for _ in range(children):
        child = _Child(proc=_dead_process(), fd=-1, started_at=0.0, ready=True)
        for _ in range(workers):
            worker = await hive.workers.register(pools=["jobs"])
            claim = await pool.claim(worker.worker_id)
            sup._on_event(child, [ev.WORKER, worker.worker_id])
            sup._on_event(child, [ev.START, worker.worker_id, claim.id, claim.token, 0])
        dead.append(child)
    return hive, store, sup, dead


async def _close(hive: Any, store: DeadStore) -> None:
    store.dead = False
    await hive.close()


def test_the_stop_waits_on_a_dead_store_once_for_all_dead_processes() -> None:
    async def main() -> tuple[list[str], Any, list[tuple[ItemState, int]]]:
        hive, store, sup, dead = await _fleet(retry_for=0.0, children=3)
        try:
            sup._finish(ExitCode.FAILURE, "storage kept failing (the test's fault)")  # the fleet stops
            store.dead = True
            for child in dead:  # killed at the stop deadline, say: dead without a word
                await asyncio.wait_for(sup._on_child_exit(child, -9), GUARD)
            report = sup._report()
            store.dead = False
            items = [(i.state, i.attempts) for i in await hive.pool("jobs").items(ItemState.CLAIMED)]
            return store.calls, report, items
        finally:
            await _close(hive, store)

    calls, report, claimed = asyncio.run(main())
    # One call waited out the retry window; every later one was not made at all.
    assert len(calls) == 1, calls
    assert report.exit_code == ExitCode.FAILURE
    assert "storage kept failing" in report.reason
    assert "the claims of 6 worker(s) could not be released and expire with their lease" in report.reason
    # Nothing was charged or given back: the six claims wait for their lease, one attempt each.
    assert claimed == [(ItemState.CLAIMED, 1)] * 6


def test_a_signal_while_the_stop_waits_on_storage_stops_the_wait() -> None:
    async def main() -> tuple[list[str], Any]:
        hive, store, sup, [child] = await _fleet(retry_for=3600.0, children=1)
        try:
            sup._finish(ExitCode.FAILURE, "storage kept failing (the test's fault)")
            store.dead = True
            settling = asyncio.create_task(sup._on_child_exit(child, -9))
            await asyncio.wait_for(store.called.wait(), GUARD)  # the stop waits on the store...
            sup._on_signal(signal.SIGTERM)  # ...and the operator has had enough
            await asyncio.wait_for(settling, GUARD)
            return store.calls, sup._report()
        finally:
            await _close(hive, store)

    calls, report = asyncio.run(main())
    assert len(calls) == 1, calls
    assert report.exit_code == ExitCode.FAILURE and "storage kept failing" in report.reason
    assert "stopped waiting for storage on SIGTERM" in report.reason
    assert "the claims of 2 worker(s) could not be released" in report.reason


def test_a_process_that_said_it_ended_asks_nothing_of_the_dead_store() -> None:
    async def main() -> tuple[list[str], Any]:
        hive, store, sup, [child] = await _fleet(retry_for=3600.0, children=1)
        try:
            reason = "storage kept failing (8 calls with no item finished): StorageUnavailable: the test's fault"
            sup._on_event(child, [ev.FATAL, ExitCode.FAILURE, reason, ev.STORAGE_FAULT])
            sup._on_event(child, [ev.EXIT, ExitCode.FAILURE, reason, 1])  # one worker could not deregister
            store.dead = True
            await asyncio.wait_for(sup._on_child_exit(child, 1), GUARD)
            return store.calls, sup._report()
        finally:
            await _close(hive, store)

    calls, report = asyncio.run(main())
    assert calls == []
    assert report.exit_code == ExitCode.FAILURE and "storage kept failing" in report.reason, report
    assert "the claims of 1 worker(s) could not be released" in report.reason


def test_a_process_stopping_on_a_storage_fault_makes_no_item_a_suspect() -> None:
    async def main() -> tuple[dict[str, Any], list[tuple[ItemState, int]]]:
        hive, store, sup, [child] = await _fleet(retry_for=3600.0, children=1)
        try:
            reason = "storage kept failing (8 calls with no item finished): StorageUnavailable: the test's fault"
            sup._on_event(child, [ev.FATAL, ExitCode.FAILURE, reason, ev.STORAGE_FAULT])
            sup.stopping = True  # no replacement is started by this test
            # The store answers again, but the process died stopping (no EXIT): its items did not kill it.
            await asyncio.wait_for(sup._on_child_exit(child, 1), GUARD)
            suspects = await hive.shared("workhive-suspects").items()
            items = await hive.pool("jobs").items(ItemState.PENDING)
            return suspects, [(i.state, i.attempts) for i in items]
        finally:
            await _close(hive, store)

    suspects, pending = asyncio.run(main())
    assert suspects == {}
    assert pending == [(ItemState.PENDING, 0)] * 4  # both claims given back unspent, beside the two never claimed


def test_reads_that_keep_failing_longer_than_the_retry_window_end_the_run() -> None:
    from workhive.errors import StorageUnavailable

    async def main() -> tuple[int, Any]:
        hive = workhive.open("memory://")
        await hive.open()
        try:
            sup = Supervisor(FleetOptions(pool="jobs", handler="json:dumps", processes=1), hive, None)
            sup.target = 0  # no worker process: only the supervisor's own reads of the counts
            sup.window = 0.2  # the store's retry_for
            reads = []

            class Unreachable:
                """Each read fails only after retrying for the whole window, as a backend with ?retry_for= does."""

                def __getattr__(self, name: str) -> Any:
                    return getattr(hive.pool("jobs"), name)

                async def stats(self) -> Any:
                    reads.append(1)
                    await asyncio.sleep(sup.window)
                    raise StorageUnavailable("cannot reach the store (the test's fault)")

            sup.pool = Unreachable()
            report = await asyncio.wait_for(sup.run(), GUARD)
            return len(reads), report
        finally:
            await hive.close()

    reads, report = asyncio.run(main())
    # Two reads have failed for longer than the window the URL allows: not eight (minutes, at ?retry_for=10).
    assert reads == 2
    assert report.exit_code == ExitCode.FAILURE and "storage kept failing" in report.reason, report
    assert "the test's fault" in report.reason
