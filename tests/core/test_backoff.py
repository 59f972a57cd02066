"""Backoff strategies: the built-ins meet the contract, and each has its own shape."""

from __future__ import annotations

import random
import statistics
from types import SimpleNamespace
from typing import Any

import pytest

import workhive
from workhive.backoff import (
    DEFAULT_MAX_RETRY_AFTER,
    BackoffStrategy,
    Constant,
    Decorrelated,
    EqualJitter,
    Exponential,
    FullJitter,
    NoBackoff,
    spec_parameters,
)
from workhive.errors import ConfigError, InvalidArgument
from workhive.hive import Hive
from workhive.plugin_manager import PluginManager
from workhive.testing.backoff import BackoffContract


class TestFullJitterContract(BackoffContract):
    def make_strategy(self, rng: random.Random) -> BackoffStrategy:
        return FullJitter(base=0.5, cap=60.0, rng=rng)


class TestEqualJitterContract(BackoffContract):
    def make_strategy(self, rng: random.Random) -> BackoffStrategy:
        return EqualJitter(base=0.5, cap=60.0, rng=rng)


class TestDecorrelatedContract(BackoffContract):
    def make_strategy(self, rng: random.Random) -> BackoffStrategy:
        return Decorrelated(base=0.5, cap=60.0, rng=rng)


class TestConstantContract(BackoffContract):
    jitters = False

    def make_strategy(self, rng: random.Random) -> BackoffStrategy:
        return Constant(base=2.0, cap=60.0, rng=rng)


class TestNoBackoffContract(BackoffContract):
    jitters = False

    def make_strategy(self, rng: random.Random) -> BackoffStrategy:
        return NoBackoff(rng=rng)


class TestExponentialContract(BackoffContract):
    jitters = False

    def make_strategy(self, rng: random.Random) -> BackoffStrategy:
        return Exponential(base=1.0, cap=30.0, max_retry_after=120.0, rng=rng)


def test_full_jitter_stays_under_the_exponential_ceiling() -> None:
    strategy = FullJitter(base=1.0, cap=1000.0, rng=random.Random(1))
    for attempt in range(1, 10):
        assert all(0.0 <= strategy.delay(attempt) <= 2.0 ** (attempt - 1) for _ in range(100))


def test_equal_jitter_waits_at_least_half_the_ceiling() -> None:
    strategy = EqualJitter(base=1.0, cap=1000.0, rng=random.Random(1))
    for attempt in range(1, 10):
        ceiling = 2.0 ** (attempt - 1)
        assert all(ceiling / 2 <= strategy.delay(attempt) <= ceiling for _ in range(100))


def test_decorrelated_never_below_base_and_grows_with_attempts() -> None:
    strategy = Decorrelated(base=1.0, cap=1000.0, rng=random.Random(1))
    means = [statistics.mean(strategy.delay(attempt) for _ in range(300)) for attempt in (1, 3, 5)]
    assert means[0] < means[1] < means[2]
    assert all(strategy.delay(a) >= 1.0 for a in range(1, 20))


def test_decorrelated_random_walk_from_the_previous_delay() -> None:
    strategy = Decorrelated(base=1.0, cap=10.0, rng=random.Random(3))
    previous = 1.0
    for _ in range(200):
        delay = strategy.delay(2, previous=previous)
        assert 1.0 <= delay <= min(10.0, previous * 3)
        previous = delay


def test_exponential_doubles_until_the_cap() -> None:
    strategy = Exponential(base=0.5, cap=10.0)
    assert [strategy.delay(a) for a in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_constant_and_none() -> None:
    assert {Constant(base=3.0).delay(a) for a in range(1, 50)} == {3.0}
    assert {NoBackoff().delay(a) for a in range(1, 50)} == {0.0}


def test_retry_after_jitter_only_adds_and_is_bounded() -> None:
    strategy = NoBackoff(retry_after_jitter=0.2, rng=random.Random(9))
    delays = [strategy.delay(1, 10.0) for _ in range(200)]
    assert min(delays) >= 10.0
    assert max(delays) <= 12.0
    assert len(set(delays)) > 100


def test_retry_after_clamped_to_a_configurable_maximum() -> None:
    assert 30.0 <= FullJitter(max_retry_after=30.0).delay(1, 3600.0) <= 33.0
    default = FullJitter().delay(1, 1e9)
    assert DEFAULT_MAX_RETRY_AFTER <= default <= DEFAULT_MAX_RETRY_AFTER * 1.1


def test_retry_after_beyond_the_strategy_cap_is_still_honoured() -> None:
    # The server knows its window better than our cap does (up to max_retry_after).
    assert FullJitter(cap=5.0).delay(1, 120.0) >= 120.0


def test_zero_retry_after_means_now() -> None:
    assert FullJitter().delay(3, 0.0) == 0.0


def test_max_attempts_tells_when_to_stop() -> None:
    strategy = FullJitter(max_attempts=3)
    assert [strategy.should_retry(a) for a in (1, 2, 3, 4)] == [True, True, False, False]
    assert FullJitter().should_retry(10**6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": 0},
        {"base": -1},
        {"cap": 0},
        {"base": 10, "cap": 5},
        {"max_attempts": 0},
        {"max_attempts": 2.5},
        {"max_retry_after": 0},
        {"retry_after_jitter": -0.1},
        {"retry_after_jitter": 2},
        {"base": float("nan")},
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidArgument):
        FullJitter(**kwargs)


@pytest.mark.parametrize("attempt", ["1", 1.5, None, True])
def test_attempt_must_be_an_integer(attempt: object) -> None:
    with pytest.raises(InvalidArgument):
        FullJitter().delay(attempt)  # type: ignore[arg-type]


def test_attempt_zero_counts_as_the_first() -> None:
    strategy = Exponential(base=2.0, cap=60.0)
    assert strategy.delay(0) == strategy.delay(1) == 2.0


def test_every_builtin_is_registered_through_the_hook() -> None:
    names = PluginManager(entry_points=False).names("backoff")
    assert {"full-jitter", "decorrelated", "equal-jitter", "constant", "none", "exponential"} <= set(names)


class _NoStorage:
    """Hive checks that the backend has every method; backoff selection never calls one."""

    capabilities = frozenset()

    def __getattr__(self, name: str) -> Any:
        async def never(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"backend.{name} must not be called")

        return never


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        ("full-jitter", FullJitter),
        ("decorrelated?base=0.2&cap=5", Decorrelated),
        ("equal-jitter?cap=10", EqualJitter),
        ("constant?base=2", Constant),
        ("none", NoBackoff),
    ],
)
def test_selected_by_spec(spec: str, cls: type) -> None:
    hive = Hive(_NoStorage(), backoff=spec, manager=PluginManager(entry_points=False))  # type: ignore[arg-type]
    assert type(hive.backoff) is cls


def test_spec_parameters_with_dashes() -> None:
    hive = Hive(
        _NoStorage(),  # type: ignore[arg-type]
        backoff="full-jitter?base=0.5&cap=60&max-attempts=4&max-retry-after=90",
        manager=PluginManager(entry_points=False),
    )
    strategy = hive.backoff
    assert isinstance(strategy, FullJitter)
    assert (strategy.base, strategy.cap, strategy.max_attempts, strategy.max_retry_after) == (0.5, 60.0, 4, 90.0)


@pytest.mark.parametrize("spec", ["full-jitter?speed=3", "full-jitter?base=fast"])
def test_spec_with_unknown_or_malformed_parameter(spec: str) -> None:
    with pytest.raises(ConfigError, match="full-jitter"):
        Hive(_NoStorage(), backoff=spec, manager=PluginManager(entry_points=False))  # type: ignore[arg-type]


class Linear:
    """A third-party strategy, as in the ``workhive_backoff`` hook's example."""

    def __init__(self, step: float = 1.0, cap: float = 60.0) -> None:
        self.step, self.cap = step, cap

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        return min(self.cap, self.step * attempt)


class Anything:
    """A strategy that takes any keyword: the core cannot list its parameters, so it judges them itself."""

    def __init__(self, **params: float) -> None:
        if set(params) - {"speed"}:
            raise TypeError(f"Anything() got unexpected parameters {sorted(set(params) - {'speed'})}")
        self.params = params

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        return 0.0


def _manager_with(name: str, factory: object) -> PluginManager:
    @workhive.hookimpl
    def workhive_backoff() -> workhive.BackoffPlugin:
        return workhive.BackoffPlugin(name=name, factory=factory, description="")  # type: ignore[arg-type]

    return PluginManager(entry_points=False, extra=[(name, SimpleNamespace(workhive_backoff=workhive_backoff))])


def test_a_plugin_strategy_is_checked_against_its_own_parameters() -> None:
    manager = _manager_with("linear", Linear)
    strategy = Hive(_NoStorage(), backoff="linear?step=2", manager=manager).backoff  # type: ignore[arg-type]
    assert isinstance(strategy, Linear) and strategy.step == 2.0
    with pytest.raises(ConfigError, match=r"linear has no parameter 'base'; it takes step, cap$"):
        Hive(_NoStorage(), backoff="linear?base=2", manager=manager)  # type: ignore[arg-type]


def test_a_strategy_taking_any_keyword_judges_them_and_the_error_is_still_a_config_error() -> None:
    manager = _manager_with("anything", Anything)
    strategy = Hive(_NoStorage(), backoff="anything?speed=3", manager=manager).backoff  # type: ignore[arg-type]
    assert isinstance(strategy, Anything) and strategy.params == {"speed": 3.0}
    with pytest.raises(ConfigError, match=r"backoff strategy 'anything\?slow=1': .*unexpected parameters \['slow'\]"):
        Hive(_NoStorage(), backoff="anything?slow=1", manager=manager)  # type: ignore[arg-type]


def test_the_builtins_list_the_parameters_a_spec_can_set() -> None:
    expected = ["base", "cap", "max-attempts", "max-retry-after", "retry-after-jitter"]
    for cls in (FullJitter, EqualJitter, Decorrelated, Constant, NoBackoff, Exponential):
        assert spec_parameters(cls) == expected
