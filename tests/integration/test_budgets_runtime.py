"""Rate budgets in a worker process's runtime, in-process on the memory backend (a frozen clock: no timing)."""

from __future__ import annotations

import pytest

import workhive
from workhive.budgets import (
    BUDGET_NAMESPACE,
    FIRST_DECREASE,
    LEARN_START_RPS,
    RAMP_SUFFIX,
    KeyRate,
    learned_rates,
)
from workhive.errors import ConfigError
from workhive.models import ItemState
from workhive.runtime.events import ListSink, Tally
from workhive.runtime.options import FleetOptions
from workhive.runtime.process import ProcessRuntime
from workhive.runtime.shared import build_budgets, build_credentials
from workhive.testing.clock import ManualClock

pytest.importorskip("workhive_memory")
pytest.importorskip("workhive_env_credentials")
from workhive_memory import MemoryStorage


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.setenv("BUDGET_TEST_KEY_1", "sk-budget-test-one")
    monkeypatch.setenv("BUDGET_TEST_KEY_2", "sk-budget-test-two")


def options(handler: str, spec: str = "env:BUDGET_TEST_KEY", **kw: object) -> FleetOptions:
    return FleetOptions(
        pool="jobs", handler=handler, storage="memory://", credentials=(spec,), heartbeat=0.2, lease=30.0, **kw
    )  # type: ignore[arg-type]


async def run(hive: workhive.Hive, opts: FleetOptions) -> Tally:
    sink = ListSink()
    await ProcessRuntime(opts, hive=hive, sink=sink).run(stop_when_empty=True)
    tally = Tally()
    for event in sink.events:
        tally.apply(event)
    return tally


class NoBudgetStorage:
    """Every storage method of the memory backend, but not the TakesBudget capability."""

    def __init__(self) -> None:
        self._inner = MemoryStorage("memory://")

    def __getattr__(self, name: str) -> object:
        if name == "take_budget":
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.mark.asyncio
async def test_budgets_on_a_backend_without_the_capability_are_an_error_at_start_naming_it() -> None:
    async with workhive.open(NoBudgetStorage()) as hive:  # type: ignore[arg-type]
        opts = options("budget_handlers:reports_usage", "env:BUDGET_TEST_KEY?rpm=60")
        with pytest.raises(ConfigError, match=r"NoBudgetStorage.*does not implement workhive.budgets.TakesBudget"):
            build_budgets(opts, hive, build_credentials(opts, hive))
        learn = options("budget_handlers:reports_usage", learn_limits=True)
        with pytest.raises(ConfigError, match="TakesBudget"):
            build_budgets(learn, hive, build_credentials(learn, hive))
        plain = options("budget_handlers:reports_usage")
        assert build_budgets(plain, hive, build_credentials(plain, hive)) is None, "no budgets, no capability needed"


@pytest.mark.asyncio
async def test_a_default_token_estimate_over_tpm_is_an_error_at_start() -> None:
    async with workhive.open("memory://") as hive:
        opts = options("budget_handlers:reports_usage", "env:BUDGET_TEST_KEY?tpm=1000", token_estimate=1001)
        with pytest.raises(ConfigError, match=r"--token-estimate.*1001 tokens can never fit its tpm budget of 1000"):
            build_budgets(opts, hive, build_credentials(opts, hive))


@pytest.mark.asyncio
async def test_learning_needs_keys() -> None:
    async with workhive.open("memory://") as hive:
        opts = FleetOptions(pool="jobs", handler="budget_handlers:reports_usage", learn_limits=True)
        with pytest.raises(ConfigError, match="give keys with --credentials"):
            build_budgets(opts, hive, None)


@pytest.mark.asyncio
async def test_every_call_takes_one_request_and_its_reported_tokens_from_its_keys_budget() -> None:
    clock = ManualClock()  # frozen: the schedule is the sum of what was taken, exactly
    async with workhive.open(MemoryStorage("memory://", clock=clock)) as hive:
        await hive.pool("jobs").push_many(list(range(20)))
        spec = "env:BUDGET_TEST_KEY?rpm=6000000&tpm=6000000000"
        tally = await run(hive, options("budget_handlers:reports_usage", spec, token_estimate=10, concurrency=4))
        assert tally.done == 20 and tally.failed == 0
        done = await hive.pool("jobs").items(ItemState.DONE, limit=50)
        names = ("BUDGET_TEST_KEY_1", "BUDGET_TEST_KEY_2")
        used = {name: sum(1 for item in done if item.result["key"] == name) for name in names}
        tats = hive.storage._budget_tats  # type: ignore[attr-defined]
        for name, calls in used.items():
            rpm = next(v for k, v in tats.items() if k.startswith(name + "#") and k.endswith(":rpm"))
            tpm = next(v for k, v in tats.items() if k.startswith(name + "#") and k.endswith(":tpm"))
            assert rpm == pytest.approx(clock() + calls * 60 / 6e6), "one request per call"
            assert tpm == pytest.approx(clock() + calls * 100 * 60 / 6e9), "the estimate, corrected to the 100 used"
        assert min(used.values()) > 0, f"the key that can go soonest, then the least recently used: {used}"


@pytest.mark.asyncio
async def test_an_estimate_that_never_fits_poisons_the_item_with_the_reason() -> None:
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        [item_id] = await pool.push_many([1])
        tally = await run(hive, options("budget_handlers:huge_estimate", "env:BUDGET_TEST_KEY?tpm=1000"))
        assert tally.poisoned == 1
        item = await pool.get(item_id)
        assert item.state is ItemState.POISONED and "can never fit its tpm budget of 1000" in item.error


@pytest.mark.asyncio
async def test_an_estimate_that_is_not_a_number_poisons_the_item() -> None:
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        [item_id] = await pool.push_many([1])
        await run(hive, options("budget_handlers:bad_estimate", "env:BUDGET_TEST_KEY?tpm=1000"))
        item = await pool.get(item_id)
        assert item.state is ItemState.POISONED and "estimate_tokens returned 'lots'" in item.error


@pytest.mark.asyncio
async def test_usage_reported_for_a_key_not_leased_fails_the_item_saying_so() -> None:
    async with workhive.open("memory://", max_attempts=1) as hive:
        pool = hive.pool("jobs")
        [item_id] = await pool.push_many([1])
        await run(hive, options("budget_handlers:reports_usage_of_another_key", "env:BUDGET_TEST_KEY?tpm=1000"))
        item = await pool.get(item_id)
        assert "'SOMEONE_ELSES_KEY' is not the one leased for this item" in item.error
        assert "sk-budget" not in item.error


@pytest.mark.asyncio
async def test_a_429_lowers_the_learned_rate_in_storage_and_status_shows_it() -> None:
    async with workhive.open("memory://") as hive:
        await hive.pool("jobs").push_many([1])
        tally = await run(hive, options("budget_handlers:rate_limited_once", learn_limits=True))
        assert tally.done == 1 and sum(tally.rate_limited.values()) == 1
        stored = await hive.shared(BUDGET_NAMESPACE).items()
        # The refused key's decrease; the retry went on the other key, still ramping up, which shares how far.
        [(name, value)] = [(n, v) for n, v in stored.items() if not n.endswith(RAMP_SUFFIX)]
        [ramping] = [n[: -len(RAMP_SUFFIX)] for n in stored if n.endswith(RAMP_SUFFIX)]
        assert ramping != name
        rate = KeyRate.from_json(value)
        assert rate is not None and rate.version == 1 and not rate.ramping
        assert rate.base == pytest.approx(LEARN_START_RPS * FIRST_DECREASE)
        shown = await learned_rates(hive)
        assert shown[name]["decreases"] == 1 and shown[name]["rpm"] >= LEARN_START_RPS * FIRST_DECREASE * 60
        assert shown[ramping] == {"rpm": LEARN_START_RPS * 60, "decreases": 0, "ramping": True}
        assert "sk-budget" not in str(shown)


@pytest.mark.asyncio
async def test_a_worker_that_slept_until_its_slot_does_not_call_into_a_429s_cooldown() -> None:
    import budget_handlers

    budget_handlers.CALLS.clear()
    budget_handlers.REFUSED.clear()
    async with workhive.open("memory://") as hive:
        await hive.pool("jobs").push_many([1, 2, 3, 4])
        # 1 call/s: the first call goes at once, the next workers reserve slots a second apart
        # and sleep until them; the first call's 429 comes back 0.9 s in and cools the key for 2 s.
        opts = options("budget_handlers:first_call_refused_late", "env:BUDGET_TEST_KEY_1?rpm=60", concurrency=3)
        tally = await run(hive, opts)
    assert tally.done == 4 and sum(tally.rate_limited.values()) == 1
    [refused] = budget_handlers.REFUSED
    inside = [t - refused for t in budget_handlers.CALLS if refused < t < refused + 2.0]
    assert not inside, f"calls went {inside} s into the 2 s cooldown"
