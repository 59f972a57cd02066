"""``ManualClock``: a backend clock that moves only when a test says so."""

from __future__ import annotations

import math

from workhive.errors import InvalidArgument

__all__ = ["ManualClock"]


class ManualClock:
    """A callable clock for backends (``clock=``): returns the same time until advanced.

    >>> clock = ManualClock()
    >>> clock()
    1700000000.0
    >>> clock.advance(2.5)
    1700000002.5
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._start = self._now = float(start)

    def __call__(self) -> float:
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r})"

    def offset(self) -> float:
        """Seconds advanced so far: what a server backend adds to its server's own clock.

        A backend that takes time from its server (PostgreSQL ``clock_timestamp()``,
        Redis ``TIME``) cannot be handed an absolute clock; it accepts
        ``clock_offset=clock.offset`` instead and adds the offset to every server
        time it reads, so the contract suite moves its time forward too.

        >>> clock = ManualClock()
        >>> _ = clock.advance(30)
        >>> clock.offset()
        30.0
        """
        return self._now - self._start

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (never backward) and return the new time."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise InvalidArgument(f"advance() takes a finite number of seconds, got {seconds!r}")
        if seconds < 0:
            raise InvalidArgument(f"a ManualClock never goes backward; got advance({seconds!r})")
        self._now += seconds
        return self._now
