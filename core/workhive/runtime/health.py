"""Per-worker health: pause after consecutive failures, give up past a budget.

A handler failing item after item usually means something outside the item
is wrong (the API is down, a client is wedged). The worker then pauses with
exponential backoff instead of burning through the queue's attempts; if it
keeps failing after ``recovery_pauses`` pauses without a single success, it
stops claiming and its process drains and exits with ``EXIT_UNHEALTHY`` so
that the supervisor replaces it with a fresh interpreter (new connections,
new client state).

>>> health = WorkerHealth(HealthPolicy(failures_before_pause=2, pause=1.0))
>>> health.failure(); health.failure()
>>> health.pause_seconds()
1.0
"""

from __future__ import annotations

import attrs

__all__ = ["HealthPolicy", "WorkerHealth"]


@attrs.frozen
class HealthPolicy:
    """How much failure a worker tolerates before pausing, and before being replaced."""

    failures_before_pause: int = 5  # consecutive handler failures that trigger a pause
    pause: float = 1.0  # first pause, seconds; doubles with every further pause
    max_pause: float = 30.0
    recovery_pauses: int = 5  # pauses without a success in between before the worker gives up


@attrs.define
class WorkerHealth:
    """Counts one worker's consecutive failures; a success resets everything."""

    policy: HealthPolicy
    consecutive_failures: int = 0
    pauses: int = 0
    _pause_due: bool = False

    def success(self) -> None:
        self.consecutive_failures = 0
        self.pauses = 0
        self._pause_due = False

    def failure(self) -> None:
        self.consecutive_failures += 1
        if self.consecutive_failures >= self.policy.failures_before_pause:
            self._pause_due = True

    @property
    def pause_due(self) -> bool:
        return self._pause_due

    @property
    def exhausted(self) -> bool:
        """True once the recovery budget is spent: stop claiming, be replaced."""
        return self.pauses >= self.policy.recovery_pauses and self._pause_due

    def pause_seconds(self) -> float:
        """Seconds to pause before the next claim (0: go on). Counts the pause when one is due."""
        if not self._pause_due or self.exhausted:
            return 0.0
        seconds = min(self.policy.max_pause, self.policy.pause * 2.0 ** min(self.pauses, 30))
        self.pauses += 1
        self._pause_due = False
        self.consecutive_failures = 0
        return seconds
