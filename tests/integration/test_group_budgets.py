"""Tenant token budgets (``Pool.set_group_budget``): charged from ``ctx.report_usage``, a spent group waits.

On the memory and SQLite backends with a manual clock (no timing): the budget
refills by exactly the time the clock is moved.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import workhive
from workhive.errors import InvalidArgument, InvalidName
from workhive.group_budgets import DAY, GROUP_BUDGET_NAMESPACE, GroupBudgets, group_budgets
from workhive.models import ItemState
from workhive.runtime.context import HandlerContext
from workhive.runtime.events import ListSink
from workhive.runtime.options import FleetOptions
from workhive.runtime.process import ProcessRuntime
from workhive.storage import ServesGroups
from workhive.testing.clock import ManualClock

pytest.importorskip("workhive_memory")
from workhive_memory import MemoryStorage

HiveOn = Callable[[ManualClock], workhive.Hive]


@pytest.fixture(params=["memory", "sqlite"])
def hive_on(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[ManualClock], workhive.Hive]:
    """A fresh hive of the engine on a manual clock; skipped on an engine that serves no groups."""

    def make(clock: ManualClock) -> workhive.Hive:
        if request.param == "memory":
            storage: object = MemoryStorage(f"memory://budgets-{uuid.uuid4().hex[:8]}", clock=clock)
        else:
            sqlite = pytest.importorskip("workhive_sqlite")
            storage = sqlite.SqliteStorage(f"sqlite:///{tmp_path / 'hive.db'}", clock=clock)
        if not isinstance(storage, ServesGroups):
            pytest.skip(f"{type(storage).__name__} serves no groups on this checkout yet")
        return workhive.open(storage)  # type: ignore[arg-type]

    return make


async def everything(hive: workhive.Hive, pool: str) -> tuple[object, ...]:
    """What a refused call must leave as it was: settings, spend, pauses, counts."""
    return (
        await hive.shared(GROUP_BUDGET_NAMESPACE).items(),
        await group_budgets(hive, pool),
        await hive.pool(pool).groups(),
        await hive.pool(pool).stats(),
    )


@pytest.mark.asyncio
async def test_bad_budgets_are_refused_and_nothing_stored_changes(hive_on: HiveOn) -> None:
    async with hive_on(ManualClock()) as hive:
        pool = hive.pool("agents")
        await pool.push_many([{"n": 1}], group="t-1")
        await pool.set_group_budget("t-1", tpd=1000)
        await GroupBudgets(hive, "agents").charge("t-1", 400)
        before = await everything(hive, "agents")
        for bad in (-1, 0, math.nan, math.inf, True, "1000"):
            with pytest.raises(InvalidArgument, match=r"tpd \(tokens per day\) must be a finite number > 0"):
                await pool.set_group_budget("t-1", tpd=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidName):
            await pool.set_group_budget("no spaces please", tpd=5)
        assert await everything(hive, "agents") == before
        [budget] = (await group_budgets(hive, "agents")).values()
        assert (budget.group, budget.tpd, budget.spent) == ("t-1", 1000.0, pytest.approx(400.0))


@pytest.mark.asyncio
async def test_a_spent_budget_pauses_its_group_whose_items_wait_while_the_others_go_on(hive_on: HiveOn) -> None:
    clock = ManualClock()
    async with hive_on(clock) as hive:
        pool = hive.pool("agents")
        await pool.push_many([{"n": n} for n in range(3)], group="t")
        await pool.push_many([{"n": n} for n in range(3)], group="u")
        await pool.set_group_budget("t", tpd=1000)
        budgets = GroupBudgets(hive, "agents")
        assert await budgets.charge("t", 600) == 0.0, "within the budget: no pause"
        paused = await budgets.charge("t", 600)  # 1200 of 1000: 200 tokens over, refilled at 1000 a day
        assert paused == pytest.approx(200 * DAY / 1000)
        stats = (await pool.groups()).group("t")
        assert stats is not None and stats.paused_until == pytest.approx(clock() + paused)

        claimed = [await pool.claim("w") for _ in range(4)]
        assert [c.group for c in claimed if c is not None] == ["u", "u", "u"] and claimed[3] is None
        assert (await pool.stats()).pending == 3, "the spent group's items wait; none failed"
        for item in claimed[:3]:
            assert item is not None
            await pool.complete(item)

        clock.advance(paused - 1.0)
        assert await pool.claim("w") is None
        clock.advance(1.0)
        item = await pool.claim("w")
        assert item is not None and item.group == "t", "refilled: the group is served again"
        [budget] = (await group_budgets(hive, "agents")).values()
        assert budget.spent == pytest.approx(1000.0) and budget.refills_in == pytest.approx(0.0, abs=1e-6)


@pytest.mark.asyncio
async def test_raising_the_budget_resumes_a_spent_group_lowering_pauses_it_and_removing_resumes_it(
    hive_on: HiveOn,
) -> None:
    clock = ManualClock()
    async with hive_on(clock) as hive:
        pool = hive.pool("agents")
        await pool.push_many([{"n": 1}], group="t")
        await pool.set_group_budget("t", tpd=1000)
        assert await GroupBudgets(hive, "agents").charge("t", 1500) > 0

        async def paused_for() -> float | None:
            stats = (await pool.groups()).group("t")
            assert stats is not None
            return None if stats.paused_until is None else stats.paused_until - clock()

        await pool.set_group_budget("t", tpd=3000)
        assert await paused_for() is None, "1500 spent of 3000: under the budget"
        assert (await group_budgets(hive, "agents"))["t"].spent == pytest.approx(1500.0), "spend is kept in tokens"
        await pool.set_group_budget("t", tpd=1000)
        assert await paused_for() == pytest.approx(500 * DAY / 1000)
        await pool.set_group_budget("t", tpd=None)
        assert await paused_for() is None and await group_budgets(hive, "agents") == {}
        assert (await pool.claim("w")) is not None


@pytest.mark.asyncio
async def test_a_worker_charges_the_usage_its_handler_reported_to_the_items_group(
    monkeypatch: pytest.MonkeyPatch, hive_on: HiveOn
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    clock = ManualClock()
    async with hive_on(clock) as hive:
        pool = hive.pool("agents")
        await pool.push_many([{"tokens": 1500}], group="t")
        await pool.push_many([{"tokens": 10}], group="u")
        await pool.set_group_budget("t", tpd=1000)
        opts = FleetOptions(pool="agents", handler="group_budget_handlers:uses_tokens", storage="memory://")
        await ProcessRuntime(opts, hive=hive, sink=ListSink()).run(stop_when_empty=True)
        assert [i.group for i in await pool.items(ItemState.DONE)] == ["t", "u"], "the item that spent it finished"
        stats = (await pool.groups()).group("t")
        assert stats is not None and stats.paused_until == pytest.approx(clock() + 500 * DAY / 1000)
        assert (await group_budgets(hive, "agents"))["t"].spent == pytest.approx(1500.0)


@pytest.mark.asyncio
async def test_usage_without_a_key_needs_a_group_to_charge(hive_on: HiveOn) -> None:
    async with hive_on(ManualClock()) as hive:
        pool = hive.pool("agents")
        await pool.push_many([{"n": 1}], group="t")
        await pool.push({"n": 2})
        both = {item.group: item for item in await pool.claim_many(2, "w")}
        grouped, plain = both["t"], both[None]
        ctx = HandlerContext(item=grouped, pool=pool, hive=hive, worker_id="w")
        ctx.report_usage(tokens=12)
        assert ctx.usage == 12.0
        with pytest.raises(InvalidArgument, match="no API key is leased for this item and it has no group"):
            HandlerContext(item=plain, pool=pool, hive=hive, worker_id="w").report_usage(tokens=12)
