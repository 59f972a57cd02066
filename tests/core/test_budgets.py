"""Rate budgets: parsing and validation, the GCRA decision, reservation, usage correction, AIMD learning.

Runs with the core alone: the storage side is a dict-backed ``TakesBudget``
over ``gcra_choose`` on a fake clock (the real backends run the contract
suite in their own tests), the learned rates live in a dict-backed shared area.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
from collections.abc import Sequence

import pytest
from fake_shared_state import DictStateBackend, FakeClock

import workhive
from workhive.budgets import (
    DECREASE,
    DECREASE_HOLD,
    FIRST_DECREASE,
    GROWTH,
    LEARN_START_RPS,
    RAMP_DOUBLING_SECONDS,
    RAMP_SLOWING,
    RAMP_SUFFIX,
    Budget,
    BudgetTake,
    FleetBudgets,
    KeyRate,
    Reservation,
    TakesBudget,
    gcra_choose,
    ramp_seconds,
)
from workhive.credentials import Credential, CredentialPool, Outcome
from workhive.errors import BudgetUnsatisfiable, ConfigError, InvalidArgument
from workhive.plugin_manager import PluginManager
from workhive.runtime.context import HandlerContext
from workhive.shared_state import SharedState


class DictBudgets:
    """A ``TakesBudget`` over a dict: what every backend does, minus the atomicity across processes."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.tats: dict[str, float] = {}
        self.calls: list[tuple[list[list[BudgetTake]], float]] = []

    async def take_budget(self, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
        self.calls.append(([list(c) for c in choices], max_wait))
        index, wait, new = gcra_choose(self.tats, self.clock(), choices, max_wait)
        self.tats.update(new)
        return index, wait


def key(name: str, **budget: float) -> Credential:
    return Credential(name, f"sk-{name}-secret", budget=Budget(**budget) if budget else None)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> DictBudgets:
    return DictBudgets(clock)


@pytest.fixture
def shared(clock: FakeClock) -> SharedState:
    return SharedState(DictStateBackend(clock), "workhive-budgets")  # type: ignore[arg-type]


# -- parsing ----------------------------------------------------------------------------------
def test_budget_parses_numbers_and_numeric_strings() -> None:
    assert Budget.parse({"rpm": "500", "tpm": 200000, "tpd": 1.5e6}, credential="K") == Budget(500, 200000, 1.5e6)
    assert Budget.parse({}, credential="K").empty
    assert Budget(rpm=90).rps == 1.5 and Budget().rps is None


@pytest.mark.parametrize("bad", [0, "0", -5, "-1", math.nan, "nan", math.inf, "inf", "fast", "", True, [500], {}])
@pytest.mark.parametrize("field", ["rpm", "tpm", "tpd"])
def test_zero_negative_nan_and_non_numbers_are_config_errors_naming_key_and_field(bad: object, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        Budget.parse({field: bad}, credential="OPENAI_API_KEY_2")
    assert "OPENAI_API_KEY_2" in str(info.value) and f"{field}=" in str(info.value)
    assert info.value.credential == "OPENAI_API_KEY_2" and info.value.field == field  # type: ignore[attr-defined]


def test_unknown_budget_fields_are_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown budget field.*rps.*rpm, tpm, tpd"):
        Budget.parse({"rps": "5"}, credential="K")


class _ListProvider:
    def __init__(self, spec: str) -> None:
        self.names = spec.split("+")

    def credentials(self) -> list[Credential]:
        return [Credential(n, f"sk-{n}", budget=Budget(tpm=1000) if n == "B" else None) for n in self.names]


class _ListPlugin:
    @workhive.hookimpl
    def workhive_credentials(self) -> workhive.CredentialsPlugin:
        return workhive.CredentialsPlugin(name="list", factory=_ListProvider)


def test_a_spec_query_gives_every_key_of_the_spec_a_budget_over_the_providers() -> None:
    manager = PluginManager(entry_points=False, extra=[("list-plugin", _ListPlugin())])
    pool = CredentialPool.from_specs(["list:A+B?rpm=500&tpd=1e6", "list:C"], manager=manager)
    budgets = {c.name: c.budget for c in pool.credentials()}
    assert budgets == {"A": Budget(rpm=500, tpd=1e6), "B": Budget(rpm=500, tpm=1000, tpd=1e6), "C": None}
    assert "sk-" not in repr(pool.credentials())


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("list:A?rpm=0", "'A': budget rpm='0' must be a positive number"),
        ("list:A?rpm=-3", "rpm='-3'"),
        ("list:A?tpm=nan", "tpm='nan'"),
        ("list:A?tpm=lots", "tpm='lots'"),
        ("list:A?rpm", "must be field=value"),
        ("list:A?rpm=1&rpm=2", "gives 'rpm' twice"),
        ("list:A?burst=3", "unknown budget field"),
    ],
)
def test_bad_spec_budgets_are_config_errors(spec: str, match: str) -> None:
    manager = PluginManager(entry_points=False, extra=[("list-plugin", _ListPlugin())])
    with pytest.raises(ConfigError, match=match):
        CredentialPool.from_specs([spec], manager=manager)


def test_a_credential_budget_must_be_a_budget() -> None:
    with pytest.raises(TypeError):
        Credential("A", "sk-a", budget={"rpm": 5})  # type: ignore[arg-type]


def test_a_token_estimate_over_tpm_or_tpd_can_never_go() -> None:
    Budget(tpm=1000, tpd=5000).check_tokens("K", 1000)
    with pytest.raises(BudgetUnsatisfiable, match=r"'K'.*1001 tokens.*tpm budget of 1000") as info:
        Budget(tpm=1000).check_tokens("K", 1001)
    assert isinstance(info.value, InvalidArgument) and info.value.field == "tpm"  # type: ignore[attr-defined]
    with pytest.raises(BudgetUnsatisfiable, match="tpd"):
        Budget(tpd=10).check_tokens("K", 11)


# -- the GCRA decision ------------------------------------------------------------------------
def test_gcra_spaces_calls_one_interval_apart_and_refuses_beyond_max_wait() -> None:
    take = BudgetTake("k", 2.0, 2.0, 1.0)
    tats: dict[str, float] = {}
    waits = []
    for _ in range(4):
        _, wait, new = gcra_choose(tats, 10.0, [[take]], 100.0)
        tats.update(new)
        waits.append(wait)
    assert waits == [0.0, 2.0, 4.0, 6.0]
    assert gcra_choose(tats, 10.0, [[take]], 7.9) == (0, 8.0, {})
    with pytest.raises(InvalidArgument):
        gcra_choose({}, 0.0, [], 1.0)


def test_gcra_takes_a_key_twice_in_one_choice_cumulatively() -> None:
    take = BudgetTake("k", 1.0, 1.0, 1.0)
    assert gcra_choose({}, 0.0, [[take, take]], 10.0) == (0, 1.0, {"k": 2.0})


# -- reserving --------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_reserve_picks_the_key_that_can_go_soonest_then_the_least_recently_used(
    store: DictBudgets, clock: FakeClock
) -> None:
    a, b = key("A", rpm=60), key("B", rpm=60)
    budgets = FleetBudgets(store, None, [a, b], reserve_ahead=math.inf, clock=clock)
    assert isinstance(store, TakesBudget) and budgets.active
    first, _ = await budgets.reserve([a, b], tokens=0, max_wait=5)
    second, _ = await budgets.reserve([a, b], tokens=0, max_wait=5)
    assert first is not None and second is not None
    assert (first.credential.name, first.wait) == ("A", 0.0)  # tie: the first given (least recently used)
    assert (second.credential.name, second.wait) == ("B", 0.0)  # A must wait a second, B can go now
    third, wait = await budgets.reserve([b, a], tokens=0, max_wait=5)
    assert third is not None and (third.credential.name, third.wait) == ("B", 1.0) == (third.credential.name, wait)


@pytest.mark.asyncio
async def test_a_known_rate_lets_a_quarter_second_of_calls_go_at_once_and_never_less_than_one(
    store: DictBudgets, clock: FakeClock
) -> None:
    """A fresh key spends a quarter of the second's worth a provider's bucket holds, then paces."""
    fast, slow = key("FAST", rpm=1200), key("SLOW", rpm=60)  # 20/s: 5 calls at once; 1/s: one
    budgets = FleetBudgets(store, None, [fast, slow], reserve_ahead=math.inf, clock=clock)
    waits = []
    for _ in range(7):
        reservation, _ = await budgets.reserve([fast], tokens=0, max_wait=5)
        assert reservation is not None
        waits.append(reservation.wait)
    assert waits[:5] == [0.0] * 5
    assert waits[5:] == pytest.approx([1 / 20, 2 / 20], abs=1e-5)
    first, _ = await budgets.reserve([slow], tokens=0, max_wait=5)
    second, _ = await budgets.reserve([slow], tokens=0, max_wait=5)
    assert first is not None and second is not None and (first.wait, second.wait) == (0.0, 1.0)
    learned = Budget().takes("L", tokens=0, rps=20.0)
    assert [(t.interval, t.tolerance) for t in learned] == [(1 / 20, 1 / 20)], "a learned rate does not burst"


@pytest.mark.asyncio
async def test_reserve_beyond_max_wait_takes_nothing_and_says_when(store: DictBudgets, clock: FakeClock) -> None:
    a = key("A", rpm=6)  # one call per 10 s
    budgets = FleetBudgets(store, None, [a], reserve_ahead=math.inf, clock=clock)
    await budgets.reserve([a], tokens=0, max_wait=5)
    before = dict(store.tats)
    assert await budgets.reserve([a], tokens=0, max_wait=5) == (None, 5.0)  # could be reserved in 5 s
    assert store.tats == before


@pytest.mark.asyncio
async def test_reservations_are_made_at_most_reserve_ahead_seconds_out(store: DictBudgets, clock: FakeClock) -> None:
    """A queue of reservations never outlives a change of the rate: slots further out are asked for later."""
    a = key("A", rpm=60)
    budgets = FleetBudgets(store, None, [a], reserve_ahead=0.5, clock=clock)
    first, _ = await budgets.reserve([a], tokens=0, max_wait=30)
    assert first is not None and first.wait == 0
    assert await budgets.reserve([a], tokens=0, max_wait=30) == (None, 0.5)
    clock.advance(0.5)
    second, wait = await budgets.reserve([a], tokens=0, max_wait=30)
    assert second is not None and wait == pytest.approx(0.5)


@pytest.mark.asyncio
async def test_workers_waiting_for_the_same_slot_cost_one_storage_call_not_one_each(
    store: DictBudgets, clock: FakeClock
) -> None:
    a, b, c = key("A", rpm=60), key("B", rpm=60), key("C", rpm=60)
    budgets = FleetBudgets(store, None, [a, b, c], reserve_ahead=0.25, clock=clock)
    for k in (a, b):
        taken, _ = await budgets.reserve([k], tokens=0, max_wait=30)
        assert taken is not None
    calls = len(store.calls)
    assert await budgets.reserve([a, b], tokens=0, max_wait=30) == (None, 0.75)
    for _ in range(10):  # the other workers woken for the same slot, and subsets of the same keys
        assert await budgets.reserve([b, a], tokens=0, max_wait=30) == (None, 0.75)
        assert await budgets.reserve([a], tokens=5, max_wait=30) == (None, 0.75)
        assert await budgets.reserve([a], tokens=0, max_wait=0.1) == (None, 0.75)
    assert len(store.calls) == calls + 1
    # A key the answer did not cover is asked about.
    found, _ = await budgets.reserve([a, b, c], tokens=0, max_wait=30)
    assert found is not None and found.credential.name == "C" and len(store.calls) == calls + 2
    clock.advance(0.75)
    first, wait = await budgets.reserve([a, b], tokens=0, max_wait=30)
    assert first is not None and wait == pytest.approx(0.25) and len(store.calls) == calls + 3
    second, _ = await budgets.reserve([a, b], tokens=0, max_wait=30)
    assert second is not None and second.credential != first.credential, "after a take, storage is asked again"


@pytest.mark.asyncio
async def test_reserve_takes_the_estimate_from_tpm_and_tpd(store: DictBudgets, clock: FakeClock) -> None:
    a = key("A", tpm=600, tpd=86400)  # 10 tokens/s, 1 token/s
    budgets = FleetBudgets(store, None, [a], reserve_ahead=math.inf, clock=clock)
    reservation, _ = await budgets.reserve([a], tokens=30, max_wait=60)
    assert reservation is not None and reservation.wait == pytest.approx(29.0)  # tpd: 30 s of tokens, 1 s burst
    keys = sorted(t.key.split(":")[1] for t in store.calls[-1][0][0])
    assert keys == ["tpd", "tpm"], "no rpm take without a known or learned rate"
    with pytest.raises(BudgetUnsatisfiable):
        await budgets.reserve([a], tokens=601, max_wait=60)
    for bad in (-1, math.nan, math.inf, "10", True):
        with pytest.raises(InvalidArgument):
            await budgets.reserve([a], tokens=bad, max_wait=60)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_reported_usage_corrects_the_reservation_by_actual_minus_estimate(
    store: DictBudgets, clock: FakeClock
) -> None:
    a = key("A", tpm=60)  # one token a second, one second of burst
    budgets = FleetBudgets(store, None, [a], reserve_ahead=math.inf, clock=clock)
    reservation, _ = await budgets.reserve([a], tokens=10, max_wait=60)
    assert reservation is not None
    await budgets.report_usage(reservation, 30)  # 20 more than estimated
    tat = next(v for k, v in store.tats.items() if k.endswith(":tpm"))
    assert tat == pytest.approx(clock() + 30.0)
    await budgets.report_usage(reservation, 0)  # gives the 10 estimated back
    tat = next(v for k, v in store.tats.items() if k.endswith(":tpm"))
    assert tat == pytest.approx(clock() + 20.0)
    for bad in (-1, math.nan, "5"):
        with pytest.raises(InvalidArgument):
            await budgets.report_usage(reservation, bad)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_a_key_without_budget_is_not_reserved_for_and_learning_gives_it_a_rate(
    store: DictBudgets, clock: FakeClock
) -> None:
    plain = key("P")
    assert not FleetBudgets(store, None, [plain], clock=clock).active
    learning = FleetBudgets(store, None, [plain], learn=True, clock=clock)
    assert learning.active and learning.rates() == {"P": LEARN_START_RPS}
    with pytest.raises(InvalidArgument, match="'Q' has no budget"):
        await learning.reserve([key("Q")], tokens=0, max_wait=1)


# -- learning (AIMD) ----------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_429_lowers_the_rate_once_per_rate_version(store: DictBudgets, clock: FakeClock, shared) -> None:
    a = key("A")
    budgets = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    r1, _ = await budgets.reserve([a], tokens=0, max_wait=60)
    r2, _ = await budgets.reserve([a], tokens=0, max_wait=60)
    assert r1 is not None and r2 is not None
    await budgets.rate_limited(r1)
    assert budgets.rates()["A"] == pytest.approx(LEARN_START_RPS * FIRST_DECREASE)
    await budgets.rate_limited(r2)  # reserved before the decrease: already answered
    assert budgets.rates()["A"] == pytest.approx(LEARN_START_RPS * FIRST_DECREASE)
    assert budgets.superseded(r1) and budgets.superseded(r2), "reserved at the rate just refused"
    clock.advance(DECREASE_HOLD / 2)
    r3, _ = await budgets.reserve([a], tokens=0, max_wait=60)
    assert r3 is not None and not budgets.superseded(r3)
    assert r3.wait == pytest.approx(0.0)  # it goes within DECREASE_HOLD of the decrease: the bucket was refilling
    await budgets.rate_limited(r3)
    assert budgets.rates()["A"] == pytest.approx(LEARN_START_RPS * FIRST_DECREASE), "answered by the decrease"
    clock.advance(DECREASE_HOLD)
    r4, _ = await budgets.reserve([a], tokens=0, max_wait=60)
    assert r4 is not None
    await budgets.rate_limited(r4)
    assert budgets.rates()["A"] == pytest.approx(LEARN_START_RPS * FIRST_DECREASE * DECREASE)
    stored = KeyRate.from_json(await shared.get("A"))
    assert stored is not None and stored.version == 2 and not stored.ramping
    assert stored.fp == a.secret.fingerprint() and "sk-" not in str(await shared.items())


@pytest.mark.asyncio
async def test_a_decrease_counts_the_time_the_key_cooled_since_the_last_one(
    store: DictBudgets, clock: FakeClock, shared
) -> None:
    """Over the limit, a provider's bucket refills while the key cools and hides the excess: the rate
    the key really took since the last decrease is the rate times the share of that time calls went."""
    a = key("A")
    budgets = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    first, _ = await budgets.reserve([a], tokens=0, max_wait=60)
    assert first is not None
    await budgets.rate_limited(first, retry_after=2.0)  # ends the ramp; the key cools for 2 s
    stored = KeyRate.from_json(await shared.get("A"))
    assert stored is not None and stored.pause == 2.0
    clock.advance(4.0)  # 2 s cooling, 2 s of calls
    short, _ = await budgets.reserve([a], tokens=0, max_wait=60)
    assert short is not None
    before = budgets.rates()["A"]
    await budgets.rate_limited(short, retry_after=1.0)
    assert budgets.rates()["A"] == pytest.approx(before * 0.5), "calls went half the time: half the rate"
    clock.advance(40.0)  # a long cycle: 1 s of cooling in 40 is no evidence of an excess
    long, _ = await budgets.reserve([a], tokens=0, max_wait=60)
    assert long is not None
    before = budgets.rates()["A"]
    await budgets.rate_limited(long)
    assert budgets.rates()["A"] == pytest.approx(before * DECREASE)
    for junk in (-1, "2", True, math.inf):
        assert KeyRate.from_json({"base": 1.0, "since": 0.0, "version": 1, "pause": junk}).pause == 0.0  # type: ignore[union-attr]


async def _paced_success(budgets: FleetBudgets, credential: Credential, clock: FakeClock, seconds: float) -> None:
    """A call that waited for budget, succeeding ``seconds`` after the previous one."""
    clock.advance(seconds)
    reservation, _ = await budgets.reserve([credential], tokens=0, max_wait=math.inf)
    assert reservation is not None
    # The budget set its pace (it waited), and the call went now: growth is credited up to when it went.
    object.__setattr__(reservation, "wait", 0.01)
    object.__setattr__(reservation, "at", clock() - 0.01)
    await budgets.succeeded(reservation)


async def _paced_for(budgets: FleetBudgets, credential: Credential, clock: FakeClock, seconds: float) -> None:
    """Paced successes every half second (a steady stream: no gap the growth credit would cap) for ``seconds``."""
    steps = math.ceil(seconds / 0.5)
    for _ in range(steps):
        await _paced_success(budgets, credential, clock, seconds / steps)


@pytest.mark.asyncio
async def test_the_rate_grows_only_while_calls_wait_for_budget(store: DictBudgets, clock: FakeClock, shared) -> None:
    a = key("A")
    budgets = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    free, _ = await budgets.reserve([a], tokens=0, max_wait=60)
    assert free is not None and free.wait == 0
    await budgets.succeeded(free)
    clock.advance(30)
    unpaced, _ = await budgets.reserve([a], tokens=0, max_wait=60)
    assert unpaced is not None and unpaced.wait == 0
    await budgets.succeeded(unpaced)
    assert budgets.rates()["A"] == LEARN_START_RPS, "calls that did not wait say nothing about the limit"
    await _paced_success(budgets, a, clock, RAMP_DOUBLING_SECONDS)
    assert budgets.rates()["A"] == pytest.approx(2 * LEARN_START_RPS), "ramping: doubles per doubling time"
    clock.advance(1000)  # idle: no growth for time in which the budget set no pace
    assert budgets.rates()["A"] == pytest.approx(2 * LEARN_START_RPS)


@pytest.mark.asyncio
async def test_each_doubling_of_a_ramp_takes_longer_than_the_one_before(
    store: DictBudgets, clock: FakeClock, shared
) -> None:
    """A provider's bucket hides an excess until it runs dry: a ramp that slows as it climbs meets it lower."""
    a = key("A")
    budgets = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    await _paced_success(budgets, a, clock, 0)
    await _paced_success(budgets, a, clock, RAMP_DOUBLING_SECONDS)
    assert budgets.rates()["A"] == pytest.approx(2 * LEARN_START_RPS)
    await _paced_success(budgets, a, clock, RAMP_DOUBLING_SECONDS)
    assert 2 * LEARN_START_RPS < budgets.rates()["A"] < 4 * LEARN_START_RPS * 0.9, "not doubled again in as long"
    await _paced_success(budgets, a, clock, RAMP_DOUBLING_SECONDS * (RAMP_SLOWING - 1.0))
    assert budgets.rates()["A"] == pytest.approx(4 * LEARN_START_RPS), "the second took RAMP_SLOWING times as long"
    await _paced_for(budgets, a, clock, RAMP_DOUBLING_SECONDS * RAMP_SLOWING**2)
    assert budgets.rates()["A"] == pytest.approx(8 * LEARN_START_RPS)


@pytest.mark.asyncio
async def test_a_late_answer_grows_the_rate_only_up_to_when_its_call_went(
    store: DictBudgets, clock: FakeClock, shared
) -> None:
    """A loaded machine hears answers late: the rate must not run ahead of what the calls showed."""
    a = key("A")
    budgets = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    await _paced_success(budgets, a, clock, 0)
    clock.advance(RAMP_DOUBLING_SECONDS)
    slow, _ = await budgets.reserve([a], tokens=0, max_wait=math.inf)
    assert slow is not None
    object.__setattr__(slow, "wait", 0.01)
    object.__setattr__(slow, "at", clock() - 0.01)  # it went now ...
    clock.advance(0.9)  # ... and its answer is heard 0.9 s later (a stalled event loop, a slow response)
    await budgets.succeeded(slow)
    assert budgets.rates()["A"] == pytest.approx(2 * LEARN_START_RPS), "one doubling time of evidence, not 1.9"
    earlier, _ = await budgets.reserve([a], tokens=0, max_wait=math.inf)
    assert earlier is not None
    object.__setattr__(earlier, "at", slow.at - 0.5)  # answered after it, but it went before: nothing new
    await budgets.succeeded(earlier)
    assert budgets.rates()["A"] == pytest.approx(2 * LEARN_START_RPS)


@pytest.mark.asyncio
async def test_a_late_429_cuts_from_the_rate_its_call_went_at_not_from_where_the_ramp_got_since(
    store: DictBudgets, clock: FakeClock, shared
) -> None:
    """While the first 429 of a ramp is on its way back, successes of later calls go on doubling the rate:
    the cut is from the rate the refused call was reserved at, so it lands near the limit that refused it."""
    a = key("A")
    budgets = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    await _paced_success(budgets, a, clock, 0)
    await _paced_success(budgets, a, clock, RAMP_DOUBLING_SECONDS)
    refused, _ = await budgets.reserve([a], tokens=0, max_wait=math.inf)
    assert refused is not None and refused.rps == pytest.approx(2 * LEARN_START_RPS)
    await _paced_for(budgets, a, clock, ramp_seconds(3) - ramp_seconds(1))  # heard before the 429 was
    assert budgets.rates()["A"] == pytest.approx(8 * LEARN_START_RPS)
    await budgets.rate_limited(refused)
    assert budgets.rates()["A"] == pytest.approx(2 * LEARN_START_RPS * FIRST_DECREASE), "not 8x the start's cut"
    clock.advance(DECREASE_HOLD + 1.0)
    unknown = Reservation(a, 0.0, 0.0, budgets._state(a).rate.version, clock())  # type: ignore[union-attr]
    before = budgets.rates()["A"]
    await budgets.rate_limited(unknown)  # made without a rate (an older caller): cut from the current one
    assert budgets.rates()["A"] == pytest.approx(before * DECREASE)


@pytest.mark.asyncio
async def test_after_a_decrease_the_rate_adds_back_gradually(store: DictBudgets, clock: FakeClock, shared) -> None:
    a = key("A")
    budgets = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    await _paced_success(budgets, a, clock, 0)
    await _paced_for(budgets, a, clock, ramp_seconds(3))
    assert budgets.rates()["A"] == pytest.approx(8 * LEARN_START_RPS)
    reservation, _ = await budgets.reserve([a], tokens=0, max_wait=math.inf)
    assert reservation is not None
    await budgets.rate_limited(reservation)
    low = 8 * LEARN_START_RPS * FIRST_DECREASE
    assert budgets.rates()["A"] == pytest.approx(low)
    await _paced_success(budgets, a, clock, 0)
    await _paced_success(budgets, a, clock, 1.0)
    assert budgets.rates()["A"] == pytest.approx(low * (1 + GROWTH)), "additive increase after the ramp"


@pytest.mark.asyncio
async def test_a_steady_state_cut_starts_from_the_mean_rate_of_the_cycle_not_its_peak(
    store: DictBudgets, clock: FakeClock, shared
) -> None:
    """Between two cuts the rate climbs: the key took the cycle's mean rate, and a cut from the peak lands
    over the limit again, so the next 429 comes sooner (simulation: cycles of 6 s instead of 9)."""
    a = key("A")
    budgets = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    first, _ = await budgets.reserve([a], tokens=0, max_wait=math.inf)
    assert first is not None
    await budgets.rate_limited(first)  # ends the ramp (no Retry-After: the key never cooled)
    clock.advance(DECREASE_HOLD)
    offered = []
    for step in [0.0] + [0.5] * 20:  # ten seconds of paced calls, the rate growing all the while
        offered.append(budgets.rates()["A"])  # the rate the next call is reserved at
        await _paced_success(budgets, a, clock, step)
    peak = budgets.rates()["A"]
    assert peak >= LEARN_START_RPS * FIRST_DECREASE * (1 + 10 * GROWTH)
    refused, _ = await budgets.reserve([a], tokens=0, max_wait=math.inf)
    assert refused is not None
    offered.append(peak)
    await budgets.rate_limited(refused)
    mean = sum(offered) / len(offered)
    assert budgets.rates()["A"] == pytest.approx(mean * DECREASE), "not the peak's cut"
    assert budgets.rates()["A"] < peak * DECREASE


@pytest.mark.asyncio
async def test_a_known_limit_is_the_ceiling_a_429_still_lowers(store: DictBudgets, clock: FakeClock, shared) -> None:
    a = key("A", rpm=120)
    budgets = FleetBudgets(store, shared, [a], reserve_ahead=math.inf, clock=clock)
    assert budgets.rates() == {"A": 2.0}
    await _paced_success(budgets, a, clock, 0)
    await _paced_success(budgets, a, clock, 5)
    assert budgets.rates() == {"A": 2.0}, "never above the known limit"
    reservation, _ = await budgets.reserve([a], tokens=0, max_wait=math.inf)
    assert reservation is not None
    await budgets.rate_limited(reservation)
    assert budgets.rates()["A"] == pytest.approx(2.0 * DECREASE), "a known key does not ramp: one decrease"
    await _paced_success(budgets, a, clock, 0)
    for _ in range(100):
        await _paced_success(budgets, a, clock, 1.0)
    assert budgets.rates() == {"A": 2.0}, "recovers up to the known limit, not beyond"


@pytest.mark.asyncio
async def test_the_learned_rate_is_shared_by_the_fleet_and_kept_across_restarts(
    store: DictBudgets, clock: FakeClock, shared
) -> None:
    a = key("A")
    one = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    other = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    r, _ = await one.reserve([a], tokens=0, max_wait=60)
    assert r is not None
    await one.rate_limited(r)
    await other.refresh(force=True)
    assert other.rates() == one.rates()
    restarted = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    await restarted.refresh(force=True)
    assert restarted.rates() == one.rates()
    replaced = FleetBudgets(store, shared, [Credential("A", "sk-another-key")], learn=True, clock=clock)
    await replaced.refresh(force=True)
    assert replaced.rates() == {"A": LEARN_START_RPS}, "a new key under the same name starts afresh"


@pytest.mark.asyncio
async def test_a_ramp_goes_at_the_pace_of_the_fleets_fastest_process_and_never_undoes_a_decrease(
    store: DictBudgets, clock: FakeClock, shared
) -> None:
    a = key("A")
    early = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    await _paced_success(early, a, clock, 0)
    await _paced_for(early, a, clock, ramp_seconds(3))
    assert early.rates()["A"] == pytest.approx(8 * LEARN_START_RPS)
    late = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)  # started later
    await late.refresh(force=True)
    assert late.rates()["A"] == pytest.approx(8 * LEARN_START_RPS), "takes the ramp up where the fleet got it"
    await _paced_success(late, a, clock, 0)
    await _paced_for(late, a, clock, ramp_seconds(4) - ramp_seconds(3))
    assert late.rates()["A"] == pytest.approx(16 * LEARN_START_RPS), "and grows on from there"
    assert KeyRate.from_json(await shared.get("A")) is None, "a ramp is shared beside the learned rate, not in it"
    # A 429 ends the ramp fleet-wide; a ramp still shared from before is never taken up again.
    reservation, _ = await late.reserve([a], tokens=0, max_wait=math.inf)
    assert reservation is not None
    await late.rate_limited(reservation)
    lowered = late.rates()["A"]
    await shared.put("A" + RAMP_SUFFIX, KeyRate(1000.0, clock(), 0, True, a.secret.fingerprint()).to_json())
    for process in (early, late, FleetBudgets(store, shared, [a], learn=True, clock=clock)):
        await process.refresh(force=True)
        assert process.rates()["A"] == pytest.approx(lowered)
    stored = KeyRate.from_json(await shared.get("A"))
    assert stored is not None and stored.version == 1 and not stored.ramping


@pytest.mark.asyncio
async def test_garbage_in_the_shared_area_is_ignored(store: DictBudgets, clock: FakeClock, shared) -> None:
    a = key("A")
    budgets = FleetBudgets(store, shared, [a], learn=True, reserve_ahead=math.inf, clock=clock)
    junk_values = (
        "x",
        {"base": -1, "since": 0, "version": 5},
        {"base": "fast", "since": 0, "version": 1},
        {"base": 5.0, "since": "yesterday", "version": 1},
        {"base": 5.0, "since": 0},
    )
    for junk in junk_values:
        await shared.put("A", junk)
        await budgets.refresh(force=True)
        assert budgets.rates() == {"A": LEARN_START_RPS}


# -- the handler's side ------------------------------------------------------------------------
def _ctx(credential: Credential | None) -> HandlerContext:
    class _Pool:
        name = "jobs"

    return HandlerContext(item=None, pool=_Pool(), hive=None, worker_id="w", credential=credential)  # type: ignore[arg-type]


def test_report_usage_adds_up_for_the_leased_key() -> None:
    ctx = _ctx(key("A"))
    ctx.report_usage(tokens=100)
    ctx.report_usage(tokens=50.5, credential="A")
    ctx.report_usage(tokens=1, credential=ctx.credential)
    assert ctx.usage == 151.5


def test_report_usage_for_a_key_not_leased_is_an_error() -> None:
    with pytest.raises(InvalidArgument, match="key 'B' is not the one leased for this item \\('A'\\)"):
        _ctx(key("A")).report_usage(tokens=5, credential="B")
    with pytest.raises(InvalidArgument, match="no API key is leased"):
        _ctx(None).report_usage(tokens=5)
    for bad in (-1, math.nan, math.inf, "5", None, True):
        with pytest.raises(InvalidArgument):
            _ctx(key("A")).report_usage(tokens=bad)  # type: ignore[arg-type]


# -- key choice in the credential pool ----------------------------------------------------------
@pytest.mark.asyncio
async def test_acquire_lets_the_budget_choose_among_usable_keys_least_recently_used_first() -> None:
    clock = FakeClock()
    pool = CredentialPool([key("A"), key("B"), key("C")], clock=clock, sleep=clock.sleep)
    seen: list[list[str]] = []

    async def choose_last(candidates: list[Credential]) -> tuple[int | None, float]:
        seen.append([c.name for c in candidates])
        return len(candidates) - 1, 0.0

    first = await pool.acquire(choose=choose_last)
    assert first.name == "C" and seen == [["A", "B", "C"]], "candidates in least-recently-used order"
    pool.release(first)
    second = await pool.acquire(choose=choose_last)
    assert seen[-1] == ["A", "B", "C"] and second.name == "C", "C, just used, comes last; the budget chose it"
    pool.release(second)

    async def choose_first(candidates: list[Credential]) -> tuple[int | None, float]:
        seen.append([c.name for c in candidates])
        return 0, 0.0

    assert (await pool.acquire(choose=choose_first)).name == "A"
    assert (await pool.acquire(choose=choose_first)).name == "B"
    assert seen[-1] == ["B", "C", "A"], "A, just used, comes last"


@pytest.mark.asyncio
async def test_acquire_waits_while_no_key_has_budget_and_gives_up_at_its_timeout() -> None:
    clock = FakeClock()
    pool = CredentialPool([key("A")], clock=clock, sleep=clock.sleep)
    answers = [(None, 2.0), (None, 3.0), (0, 0.0)]

    async def choose(candidates: list[Credential]) -> tuple[int | None, float]:
        return answers.pop(0)

    assert (await pool.acquire(timeout=10, choose=choose)).name == "A"
    assert clock.slept == [2.0, 3.0], "slept until each answer said budget would be there"
    pool.release(pool.credentials()[0])

    async def never(candidates: list[Credential]) -> tuple[int | None, float]:
        return None, 60.0

    with pytest.raises(workhive.NoCredentialAvailable):
        await pool.acquire(timeout=10, choose=never)


# -- concurrency (calls in flight per key, fleet-wide) ----------------------------------------
def test_concurrency_parses_as_a_whole_number_beside_the_rates() -> None:
    assert Budget.parse({"concurrency": "8", "rpm": "60"}, credential="K") == Budget(rpm=60, concurrency=8)
    assert Budget.parse({"concurrency": 3}, credential="K").empty, "a concurrency limit is not a rate"


@pytest.mark.parametrize("bad", [0, "0", -1, "-2", "1.5", 2.0, "eight", "", True, None.__class__])
def test_a_bad_concurrency_is_a_config_error_naming_the_credential_never_its_secret(bad: object) -> None:
    manager = PluginManager(entry_points=False, extra=[("list-plugin", _ListPlugin())])
    with pytest.raises(ConfigError) as info:
        Budget.parse({"concurrency": bad}, credential="OPENAI_API_KEY_2")
    assert "'OPENAI_API_KEY_2'" in str(info.value) and "concurrency=" in str(info.value)
    assert info.value.field == "concurrency"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"credential 'A': budget concurrency='0' must be a whole number >= 1"):
        CredentialPool.from_specs(["list:A?rpm=60&concurrency=0"], manager=manager)
    with pytest.raises(InvalidArgument):
        Budget(concurrency=0)


def test_a_spec_concurrency_caps_each_process_too() -> None:
    manager = PluginManager(entry_points=False, extra=[("list-plugin", _ListPlugin())])
    pool = CredentialPool.from_specs(["list:A?concurrency=2"], manager=manager)
    (a,) = pool.credentials()
    assert a.budget == Budget(concurrency=2)
    import asyncio

    async def take_three() -> None:
        await pool.acquire(timeout=0)
        await pool.acquire(timeout=0)
        with pytest.raises(workhive.errors.NoCredentialAvailable):  # a third would only wait for a fleet slot
            await pool.acquire(timeout=0)

    asyncio.run(take_three())


# -- a provider whose limit moves, on a manual clock ---------------------------------------------
class _Bucket:
    """A provider's token bucket holding one second's worth of its limit (as the demo's fake API)."""

    def __init__(self, clock: FakeClock, limit: float) -> None:
        self.clock, self.limit, self.level, self.at = clock, limit, limit, clock()

    def admit(self) -> bool:
        now = self.clock()
        self.level = min(self.limit, self.level + (now - self.at) * self.limit)
        self.at = now
        if self.level < 1.0:
            return False
        self.level -= 1.0
        return True

    def set_limit(self, limit: float) -> None:
        now = self.clock()  # refill at the old limit up to now, then the new one holds
        self.level, self.at = min(self.limit, self.level + (now - self.at) * self.limit), now
        self.limit, self.level = limit, min(self.level, limit)


async def _fleet_against(
    bucket: _Bucket, schedule: dict[float, float], seconds: float, clock: FakeClock, shared, delay: float = 0.0
) -> list[tuple[int, int, int]]:
    """Calls paced by a learning budget, back to back (a deep queue of workers), each answer heard
    ``delay`` seconds after its call went (a loaded machine hears late); a 429 cools the key for its
    1 s Retry-After from when its call went, as the credential pool does. Returns (second, successes,
    429s) for each second of the run."""
    a = key("A")
    budgets = FleetBudgets(DictBudgets(clock), shared, [a], learn=True, clock=clock)
    pool = CredentialPool([a], clock=clock)
    start, per_second = clock(), collections.defaultdict(lambda: [0, 0])
    pending = sorted(schedule.items())
    answers: list[tuple[float, int, Reservation, bool, float]] = []  # (heard at, order, ...): a heap
    order = itertools.count()
    while (elapsed := clock() - start) < seconds:
        if pending and elapsed >= pending[0][0]:
            bucket.set_limit(pending.pop(0)[1])
        reservation, wait = await budgets.reserve([a], tokens=0, max_wait=math.inf)
        goes = clock() + max(wait, 0.0)
        while answers and answers[0][0] <= goes:  # the answers heard while this worker waits
            heard, _, answered, ok, went = heapq.heappop(answers)
            clock.advance(max(0.0, heard - clock()))
            if ok:
                await budgets.succeeded(answered)
            else:
                await budgets.rate_limited(answered, retry_after=1.0)
                await pool.report(a, Outcome.RATE_LIMITED, retry_after=1.0, sent_at=went)
        clock.advance(max(0.0, goes - clock()))
        if reservation is None or not pool.usable(a) or budgets.superseded(reservation):
            continue  # the key cooled or its rate was cut meanwhile: the worker reserves again
        ok = bucket.admit()
        per_second[int(clock() - start)][0 if ok else 1] += 1
        heapq.heappush(answers, (clock() + delay, next(order), reservation, ok, clock()))
    return [(t, *per_second[t]) for t in range(int(seconds))]


def _settled_after(counts: list[tuple[int, int, int]], change: int, limit: float) -> int | None:
    """Seconds from ``change`` until three seconds of successes are within 10% of ``limit`` per second."""
    for t in range(change, len(counts) - 2):
        ok = sum(c[1] for c in counts[t : t + 3]) / 3
        calls = sum(c[1] + c[2] for c in counts[t : t + 3]) / 3
        if ok >= 0.9 * limit and calls <= 1.1 * limit:
            return t - change
    return None


@pytest.mark.asyncio
async def test_a_learned_rate_follows_a_limit_that_halves_and_doubles_back_within_30_s(
    clock: FakeClock, shared
) -> None:
    counts = await _fleet_against(_Bucket(clock, 20.0), {20.0: 10.0, 40.0: 20.0}, 75.0, clock, shared)
    halved, doubled = _settled_after(counts, 20, 10.0), _settled_after(counts, 40, 20.0)
    assert halved is not None and halved <= 30, counts[20:50]
    assert doubled is not None and doubled <= 30, counts[40:]
    limited = sum(c[2] for c in counts[5:])  # after the ramp's end
    assert limited <= 0.03 * sum(c[1] + c[2] for c in counts[5:]), counts


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("delay", "at_least", "at_most_429s"), [(0.05, 0.92, 0.02), (0.5, 0.90, 0.05), (1.0, 0.88, 0.10)]
)
async def test_answers_heard_late_cost_a_learned_rate_little(
    clock: FakeClock, shared, delay: float, at_least: float, at_most_429s: float
) -> None:
    """What a loaded machine did: answers heard 0.5 s after their calls went. Growth credited up to when
    the answer was heard and cooldowns counted from then held the key to 85% (measured here)."""
    counts = await _fleet_against(_Bucket(clock, 20.0), {}, 30.0, clock, shared, delay=delay)
    ok, limited = sum(c[1] for c in counts), sum(c[2] for c in counts)
    assert ok >= at_least * 20.0 * 31.0, counts
    assert limited <= at_most_429s * (ok + limited), counts
