"""The contract every backoff strategy meets, as a base class for pytest.

Subclass it in your plugin's tests and build your strategy from the seeded
``random.Random`` handed in::

    from workhive.testing.backoff import BackoffContract
    from my_package import Linear

    class TestLinear(BackoffContract):
        def make_strategy(self, rng):
            return Linear(step=2.0, cap=30.0, rng=rng)

The suite reads ``cap`` (the longest delay the strategy may return without a
Retry-After) and ``max_retry_after`` from the strategy, or from the class
attributes of the same names when the strategy does not expose them. Set
``jitters = False`` for a strategy whose own delays have no randomness (constant, none).
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workhive.backoff import BackoffStrategy
from workhive.errors import InvalidArgument

__all__ = ["BackoffContract"]

_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)


class BackoffContract:
    """Base test class: override ``make_strategy(rng)``."""

    #: used when the strategy has no ``cap`` attribute
    cap: float | None = None
    #: used when the strategy has no ``max_retry_after`` attribute
    max_retry_after: float | None = None
    #: at most this fraction of a Retry-After may be added as jitter
    retry_after_slack: float = 0.25
    #: whether the strategy's own delays vary from draw to draw
    jitters: bool = True
    #: whether waits for the same Retry-After vary (they should: a fleet must not retry in lockstep)
    retry_after_jitters: bool = True

    def make_strategy(self, rng: random.Random) -> BackoffStrategy:
        raise NotImplementedError("subclass BackoffContract and return your strategy from make_strategy(rng)")

    # -- helpers ----------------------------------------------------------------
    def _strategy(self, seed: int = 0) -> BackoffStrategy:
        return self.make_strategy(random.Random(seed))

    def _cap(self, strategy: BackoffStrategy) -> float:
        cap = getattr(strategy, "cap", None) if self.cap is None else self.cap
        assert cap is not None, "set BackoffContract.cap or give the strategy a `cap` attribute"
        return float(cap)

    def _max_retry_after(self, strategy: BackoffStrategy) -> float:
        limit = getattr(strategy, "max_retry_after", None) if self.max_retry_after is None else self.max_retry_after
        assert limit is not None, "set BackoffContract.max_retry_after or give the strategy that attribute"
        return float(limit)

    # -- the contract -----------------------------------------------------------------
    def test_is_a_backoff_strategy(self) -> None:
        assert isinstance(self._strategy(), BackoffStrategy)

    @_SETTINGS
    @given(attempt=st.integers(min_value=1, max_value=10**6), seed=st.integers(0, 2**32))
    def test_delay_is_finite_nonnegative_and_within_cap(self, attempt: int, seed: int) -> None:
        strategy = self._strategy(seed)
        delay = strategy.delay(attempt)
        assert isinstance(delay, float)
        assert math.isfinite(delay)
        assert 0.0 <= delay <= self._cap(strategy)

    def test_cap_is_respected_for_every_attempt(self) -> None:
        strategy = self._strategy(1)
        cap = self._cap(strategy)
        assert all(strategy.delay(attempt) <= cap for attempt in range(1, 300))

    def test_huge_attempt_numbers_do_not_overflow(self) -> None:
        strategy = self._strategy(2)
        for attempt in (1023, 1024, 5000, 10**9):
            assert 0.0 <= strategy.delay(attempt) <= self._cap(strategy)

    def test_same_seed_same_delays(self) -> None:
        first, second = self._strategy(42), self._strategy(42)
        sequence = [(a, None) for a in range(1, 30)] + [(1, 5.0), (3, 12.5)]
        assert [first.delay(a, r) for a, r in sequence] == [second.delay(a, r) for a, r in sequence]

    def test_delays_vary_when_the_strategy_jitters(self) -> None:
        if not self.jitters:
            pytest.skip("this strategy declares no jitter")
        strategy = self._strategy(7)
        assert len({strategy.delay(5) for _ in range(50)}) > 1

    @_SETTINGS
    @given(retry_after=st.floats(min_value=0.0, max_value=1e4, allow_nan=False), seed=st.integers(0, 2**32))
    def test_retry_after_is_honoured_never_shortened(self, retry_after: float, seed: int) -> None:
        strategy = self._strategy(seed)
        expected = min(retry_after, self._max_retry_after(strategy))
        delay = strategy.delay(1, retry_after)
        assert expected <= delay <= expected * (1 + self.retry_after_slack) + 1e-9

    def test_retry_after_wins_over_the_strategy_at_any_attempt(self) -> None:
        strategy = self._strategy(3)
        cap = self._cap(strategy)
        limit = self._max_retry_after(strategy)
        wanted = min(cap * 3, limit)  # longer than the strategy would ever wait on its own
        assert strategy.delay(40, wanted) >= wanted

    def test_huge_retry_after_is_clamped(self) -> None:
        strategy = self._strategy(4)
        limit = self._max_retry_after(strategy)
        for huge in (limit * 10, 1e18, math.inf):
            delay = strategy.delay(1, huge)
            assert math.isfinite(delay)
            assert limit <= delay <= limit * (1 + self.retry_after_slack) + 1e-9

    def test_retry_after_is_spread_so_a_fleet_does_not_retry_in_lockstep(self) -> None:
        if not self.retry_after_jitters:
            pytest.skip("this strategy declares no jitter")
        strategy = self._strategy(5)
        assert len({strategy.delay(1, 30.0) for _ in range(20)}) > 1

    @pytest.mark.parametrize("bad", [-1.0, math.nan])
    def test_negative_or_nan_retry_after_is_refused(self, bad: float) -> None:
        with pytest.raises(InvalidArgument):
            self._strategy().delay(1, bad)
