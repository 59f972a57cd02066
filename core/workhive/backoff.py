"""Backoff strategies: how long to wait before retrying attempt N.

The core registers its built-in strategies through the same hook a plugin
uses (this module is the built-in plugin ``builtin-backoff``).

>>> strategy = FullJitter(base=1.0, cap=30.0)
>>> 0.0 <= strategy.delay(3) <= 4.0
True
"""

from __future__ import annotations

import random
from typing import Protocol, runtime_checkable

from workhive.hookspecs import hookimpl
from workhive.plugin_types import BackoffPlugin
from workhive.validation import check_nonnegative, check_positive

__all__ = ["BackoffStrategy", "FullJitter"]


@runtime_checkable
class BackoffStrategy(Protocol):
    """Seconds to wait before the next try, after ``attempt`` tries (1-based) failed.

    A server's ``retry_after`` (seconds), when given, wins over the strategy.
    """

    def delay(self, attempt: int, retry_after: float | None = None) -> float: ...


class FullJitter:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base × 2^(attempt-1))].

    The default: it spreads a fleet's retries out so they do not arrive in
    lockstep, at the price of sometimes retrying almost at once.
    """

    def __init__(self, base: float = 1.0, cap: float = 60.0, rng: random.Random | None = None) -> None:
        self.base = check_positive("base", float(base))
        self.cap = check_positive("cap", float(cap))
        self._rng = rng or random.Random()

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(check_nonnegative("retry_after", retry_after), self.cap)
        exponent = min(max(attempt, 1) - 1, 62)  # 2**62 × base is past any cap; avoids overflow
        return self._rng.uniform(0.0, min(self.cap, self.base * 2.0**exponent))

    def __repr__(self) -> str:
        return f"FullJitter(base={self.base}, cap={self.cap})"


@hookimpl
def workhive_backoff() -> list[BackoffPlugin]:
    return [
        BackoffPlugin(
            name="full-jitter",
            factory=FullJitter,
            description="exponential, uniform jitter in [0, min(cap, base·2^n)] (default)",
        ),
    ]
