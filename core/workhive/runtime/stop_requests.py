"""Counting an operator's requests to stop, not the signals that carry them.

One request can arrive as more than one signal. ``timeout`` signals the
process it runs and then that process's whole group, and on a busy machine
the supervisor takes both deliveries before the kernel can merge them; a
Ctrl-C reaches every process of the terminal's foreground group. Worker
processes are kept out of the supervisor's group (they run in a session of
their own and stop only when the supervisor tells them, or when it dies), so
a group signal reaches the supervisor alone. What is left is the double
delivery to the supervisor itself: a second signal of the same kind within
``ECHO_WINDOW`` seconds of the first is that same request. A deliberate second
request (Ctrl-C pressed again after the "stopping" message, a second
``kill``) comes later than that and still means "stop now".

>>> clock = iter([10.0, 10.001, 14.0]).__next__
>>> requests = StopRequests(clock=clock)
>>> requests.note(15), requests.note(15), requests.note(15)
(True, False, True)
>>> requests.count
2
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["ECHO_WINDOW", "StopRequests"]

#: a signal repeated this soon after the one that made a request is the same request delivered
#: twice (to the process and to its group); far longer than the microseconds between the two
#: deliveries, far shorter than an operator takes to read "stopping" and press Ctrl-C again
ECHO_WINDOW = 1.0


class StopRequests:
    """Turns signals into requests: ``note`` says whether a signal is a new request."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.count = 0
        self.echoes = 0  # signals taken as a repeat of the request before them
        self._clock = clock
        self._last: tuple[int, float] | None = None  # signal number and time of the last request

    def note(self, signum: int) -> bool:
        """True when ``signum`` is a new request (then ``count`` grows), False for an echo of the last one."""
        now = self._clock()
        if self._last is not None and self._last[0] == signum and now - self._last[1] < ECHO_WINDOW:
            self.echoes += 1
            return False
        self._last = (signum, now)
        self.count += 1
        return True
