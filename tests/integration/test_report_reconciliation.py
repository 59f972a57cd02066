"""A process that dies between committing completions and reporting them: the report still agrees with storage."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import workhive
from workhive.runtime import events as ev
from workhive.runtime.options import FleetOptions
from workhive.runtime.patience import WaitBudget
from workhive.runtime.supervisor import Supervisor

from .conftest import bookkeeping_child

pytest.importorskip("workhive_memory")


def test_completions_committed_but_never_reported_are_counted_from_storage() -> None:
    async def main() -> Any:
        async with workhive.open("memory://") as hive:
            pool = hive.pool("jobs")
            await pool.push_many([{"n": i} for i in range(4)])
            done_unreported, done_reported, failed, still_claimed = [await pool.claim("w1") for _ in range(4)]
            await pool.complete(done_unreported, None)
            await pool.complete(done_reported, None)
            await pool.fail(failed, "boom")
            sup = Supervisor(FleetOptions(pool="jobs", handler="json:dumps", storage="memory://"), hive, None)
            child = bookkeeping_child()  # the bookkeeping of one worker process, without a real process
            for n, item in enumerate((done_unreported, done_reported, failed, still_claimed)):
                sup._on_event(child, [ev.START, f"w{n}", item.id, item.token])
            sup._on_event(child, [ev.DONE, 1, done_reported.id])
            sup._on_event(child, [ev.FAILED, 1, failed.id, "boom"])
            assert sup.tally.done == 1
            # The process died: storage says which finished.
            await sup.aftermath.count_unreported(child, WaitBudget(30.0, "the test"))
            return sup.tally, child.unreported

    tally, unreported = asyncio.run(main())
    assert tally.done == 2  # the reported one, and the one committed before the process died
    assert tally.failed == 1 and unreported == {}


def test_a_poisoning_committed_but_never_reported_is_counted_from_storage() -> None:
    """A child poisons an item (its last attempt failed) and dies before its POISONED event leaves
    it (another handler's ``os._exit``): the report still counts it, as the store does."""

    async def main() -> Any:
        async with workhive.open("memory://") as hive:
            pool = hive.pool("jobs")
            await pool.push({"n": 1}, max_attempts=1)
            await pool.push({"n": 2})
            poisoned, still_claimed = await pool.claim("w1"), await pool.claim("w2")
            await pool.fail(poisoned, "boom")  # its only attempt: POISONED
            sup = Supervisor(FleetOptions(pool="jobs", handler="json:dumps", storage="memory://"), hive, None)
            child = bookkeeping_child()
            for n, item in enumerate((poisoned, still_claimed)):
                sup._on_event(child, [ev.START, f"w{n}", item.id, item.token])
            await sup.aftermath.count_unreported(child, WaitBudget(30.0, "the test"))
            return sup.tally

    tally = asyncio.run(main())
    assert tally.poisoned == 1 and tally.done == 0  # the claim still held is the supervisor's to judge
