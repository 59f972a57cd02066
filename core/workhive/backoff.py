"""Backoff strategies: how long to wait before retrying attempt N.

The core registers its built-in strategies through the same hook a plugin
uses (this module is the built-in plugin ``builtin-backoff``): ``full-jitter``
(the default), ``decorrelated``, ``equal-jitter``, ``constant``, ``none``, and
``exponential`` (no jitter: the baseline the others are measured against in
``bench/backoff.py``; a fleet should not use it).

Every strategy takes ``base``, ``cap`` and ``max_attempts`` (selected as
``full-jitter?base=0.5&cap=60&max-attempts=8``) plus ``max_retry_after`` and
``retry_after_jitter`` for the server's Retry-After, which wins over the
strategy: it is clamped to ``max_retry_after`` and gets up to
``retry_after_jitter`` × its value added, so a fleet told "retry in 30 s" does
not come back in lockstep at second 30. It is never shortened: coming back
before the server said would only earn another 429.

Randomness comes from the ``rng`` given (a seeded ``random.Random`` makes a
strategy deterministic, which the contract suite checks).

>>> strategy = FullJitter(base=1.0, cap=30.0)
>>> 0.0 <= strategy.delay(3) <= 4.0
True
>>> 12.0 <= strategy.delay(1, retry_after=12.0) <= 12.0 * 1.1
True
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from workhive.errors import ConfigError, InvalidArgument
from workhive.hookspecs import hookimpl
from workhive.plugin_types import BackoffPlugin
from workhive.validation import check_nonnegative, check_positive

__all__ = [
    "BackoffStrategy",
    "Constant",
    "Decorrelated",
    "EqualJitter",
    "Exponential",
    "FullJitter",
    "NoBackoff",
    "from_spec",
    "DEFAULT_MAX_RETRY_AFTER",
    "DEFAULT_RETRY_AFTER_JITTER",
]

#: a Retry-After longer than this (seconds) is clamped: a server asking for a day is misconfigured
DEFAULT_MAX_RETRY_AFTER = 600.0
#: up to this fraction of a Retry-After is added at random, so a fleet spreads out
DEFAULT_RETRY_AFTER_JITTER = 0.1


@runtime_checkable
class BackoffStrategy(Protocol):
    """Seconds to wait before the next try, after ``attempt`` tries (1-based) failed.

    A server's ``retry_after`` (seconds), when given, wins over the strategy.
    """

    def delay(self, attempt: int, retry_after: float | None = None) -> float: ...


def _attempt(attempt: int) -> int:
    if isinstance(attempt, bool) or not isinstance(attempt, int):
        raise InvalidArgument(f"attempt must be an integer >= 1, got {attempt!r}", value=attempt)
    return max(attempt, 1)  # 0 or less means "nothing failed yet": treat as the first retry


def _max_attempts(value: float | None) -> int | None:
    # Spec parameters arrive as floats (``max-attempts=5`` → 5.0); accept whole numbers only.
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise InvalidArgument(f"max_attempts must be a whole number >= 1, got {value!r}", value=value)
    return int(value)


class _Strategy:
    """What every built-in shares: parameters, Retry-After handling, the attempt limit."""

    name = "?"

    def __init__(
        self,
        base: float = 1.0,
        cap: float = 60.0,
        max_attempts: float | None = None,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
        retry_after_jitter: float = DEFAULT_RETRY_AFTER_JITTER,
        rng: random.Random | None = None,
    ) -> None:
        self.base = check_positive("base", base)
        self.cap = check_positive("cap", cap)
        if self.base > self.cap:
            raise InvalidArgument(f"base ({self.base}) must not exceed cap ({self.cap})", value=self.base)
        self.max_attempts = _max_attempts(max_attempts)
        self.max_retry_after = check_positive("max_retry_after", max_retry_after)
        self.retry_after_jitter = check_nonnegative("retry_after_jitter", retry_after_jitter)
        if self.retry_after_jitter > 1:
            raise InvalidArgument(
                f"retry_after_jitter is a fraction of the Retry-After (0 to 1), got {retry_after_jitter!r}",
                value=retry_after_jitter,
            )
        self._rng = rng if rng is not None else random.Random()

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after ``attempt`` failed tries; a server's ``retry_after`` wins."""
        attempt = _attempt(attempt)
        if retry_after is not None:
            return self.honour_retry_after(retry_after)
        return self._delay(attempt)

    def honour_retry_after(self, retry_after: float) -> float:
        """``retry_after`` clamped to ``max_retry_after``, plus a little jitter (never less than asked).

        ``math.inf`` (an unparseable huge header) clamps like any other huge value;
        a negative or NaN one is a caller bug and raises ``InvalidArgument``.
        """
        if isinstance(retry_after, bool) or not isinstance(retry_after, (int, float)) or not retry_after >= 0:
            raise InvalidArgument(f"retry_after must be a number >= 0, got {retry_after!r}", value=retry_after)
        wait = min(float(retry_after), self.max_retry_after)
        return wait + self._rng.uniform(0.0, wait * self.retry_after_jitter)

    def should_retry(self, attempt: int) -> bool:
        """False once ``attempt`` tries have failed and ``max_attempts`` says stop (None: never stop)."""
        return self.max_attempts is None or _attempt(attempt) < self.max_attempts

    def _ceiling(self, attempt: int) -> float:
        exponent = min(attempt - 1, 1023)  # 2**1023 × base is past any cap; beyond it floats overflow
        try:
            return min(self.cap, self.base * 2.0**exponent)
        except OverflowError:
            return self.cap

    def _delay(self, attempt: int) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        limit = "" if self.max_attempts is None else f", max_attempts={self.max_attempts}"
        return f"{type(self).__name__}(base={self.base}, cap={self.cap}{limit})"


class FullJitter(_Strategy):
    """Exponential backoff with full jitter: uniform in [0, min(cap, base × 2^(attempt-1))].

    The default: it spreads a fleet's retries out so they do not arrive in
    lockstep, at the price of sometimes retrying almost at once.

    >>> 0 <= FullJitter(base=0.5, cap=60, rng=random.Random(1)).delay(4) <= 4.0
    True
    """

    name = "full-jitter"

    def _delay(self, attempt: int) -> float:
        return self._rng.uniform(0.0, self._ceiling(attempt))


class EqualJitter(_Strategy):
    """Half exponential, half jitter: t/2 + uniform(0, t/2) with t = min(cap, base × 2^(attempt-1)).

    Never retries almost at once (at least half the exponential delay), at the
    price of less spreading than full jitter.

    >>> 2.0 <= EqualJitter(base=1, cap=60).delay(3) <= 4.0
    True
    """

    name = "equal-jitter"

    def _delay(self, attempt: int) -> float:
        half = self._ceiling(attempt) / 2.0
        return half + self._rng.uniform(0.0, half)


class Decorrelated(_Strategy):
    """Decorrelated jitter: uniform(base, 3 × previous delay), capped.

    Given the previous delay (``delay(attempt, previous=…)``) it is the classic
    random walk. Called with the attempt number alone — the ``BackoffStrategy``
    protocol, where one strategy serves many items and keeps no per-item
    state — the previous delay's upper bound stands in for it:
    uniform(base, min(cap, base × 3^attempt)), so the envelope grows by 3× per
    attempt like the walk's does.

    >>> 1.0 <= Decorrelated(base=1, cap=60).delay(2) <= 9.0
    True
    >>> 1.0 <= Decorrelated(base=1, cap=60).delay(5, previous=2.0) <= 6.0
    True
    """

    name = "decorrelated"

    def delay(self, attempt: int, retry_after: float | None = None, *, previous: float | None = None) -> float:
        attempt = _attempt(attempt)
        if retry_after is not None:
            return self.honour_retry_after(retry_after)
        if previous is None:
            return self._delay(attempt)
        previous = check_nonnegative("previous", previous)
        return min(self.cap, self._rng.uniform(self.base, max(self.base, previous * 3.0)))

    def _delay(self, attempt: int) -> float:
        try:
            upper = min(self.cap, self.base * 3.0 ** min(attempt, 640))  # 3**640 is past any cap
        except OverflowError:
            upper = self.cap
        return min(self.cap, self._rng.uniform(self.base, upper))


class Exponential(_Strategy):
    """Plain exponential backoff, no jitter: min(cap, base × 2^(attempt-1)).

    Registered as the baseline for ``bench/backoff.py``: clients that failed
    together retry together, so under contention it wastes calls. Prefer
    ``full-jitter``.
    """

    name = "exponential"

    def _delay(self, attempt: int) -> float:
        return self._ceiling(attempt)


class Constant(_Strategy):
    """The same delay every time: ``base`` seconds (capped by ``cap``)."""

    name = "constant"

    def _delay(self, attempt: int) -> float:
        return min(self.base, self.cap)


class NoBackoff(_Strategy):
    """Retry at once (0 s), except that a server's Retry-After is still honoured."""

    name = "none"

    def _delay(self, attempt: int) -> float:
        return 0.0


_BUILTINS: tuple[tuple[type[_Strategy], str], ...] = (
    (FullJitter, "exponential, uniform jitter in [0, min(cap, base·2^n)] (default)"),
    (EqualJitter, "exponential, half fixed and half jitter: t/2 + uniform(0, t/2)"),
    (Decorrelated, "decorrelated jitter: uniform(base, 3·previous), capped"),
    (Constant, "the same delay (base) every time"),
    (NoBackoff, "retry at once (Retry-After still honoured)"),
    (Exponential, "exponential without jitter (a baseline for benchmarks; prefer full-jitter)"),
)


#: factory parameters a spec cannot set: they take Python objects, not numbers
_NOT_FROM_SPEC = frozenset({"rng"})


def spec_parameters(factory: object) -> list[str] | None:
    """The parameters a spec can give ``factory``, in dash form; None if it takes any keyword.

    >>> spec_parameters(Constant)
    ['base', 'cap', 'max-attempts', 'max-retry-after', 'retry-after-jitter']
    """
    try:
        signature = inspect.signature(factory)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # a callable Python cannot introspect: let it judge its keywords
        return None
    names: list[str] = []
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            return None
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            if parameter.name not in _NOT_FROM_SPEC:
                names.append(parameter.name.replace("_", "-"))
    return names


def from_spec(plugin: BackoffPlugin, spec: str, params: Mapping[str, str]) -> BackoffStrategy:
    """Build ``plugin``'s strategy from a spec's parameters (``base=0.5``), or ConfigError saying what is wrong.

    Keys are written with dashes (``max-attempts=5``) and become the factory's
    keywords; values must be numbers. An unknown key is refused with the list
    of the ones the strategy takes.

    >>> from_spec(workhive_backoff()[3], "constant?base=2", {"base": "2"})
    Constant(base=2.0, cap=60.0)
    """
    accepted = spec_parameters(plugin.factory)
    kwargs: dict[str, float] = {}
    for key, value in params.items():
        if accepted is not None and key.replace("_", "-") not in accepted:
            about = f" ({plugin.name}: {plugin.description})" if plugin.description else ""
            raise ConfigError(
                f"backoff strategy {spec!r}: {plugin.name} has no parameter {key!r}; "
                f"it takes {', '.join(accepted) or 'no parameters'}{about}",
                spec=spec,
                parameters=accepted,
            )
        try:
            kwargs[key.replace("-", "_")] = float(value)
        except ValueError:
            raise ConfigError(f"parameter {key}={value!r} of backoff strategy {spec!r} must be a number") from None
    try:
        strategy: BackoffStrategy = plugin.factory(**kwargs)
    except (InvalidArgument, TypeError) as exc:
        raise ConfigError(f"backoff strategy {spec!r}: {exc}", spec=spec) from None
    return strategy


@hookimpl
def workhive_backoff() -> list[BackoffPlugin]:
    return [BackoffPlugin(name=cls.name, factory=cls, description=text) for cls, text in _BUILTINS]
