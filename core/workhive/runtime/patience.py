"""How long the fleet waits on storage that has stopped answering.

A backend that reconnects on its own (redis, postgres) keeps retrying a lost
connection for its ``retry_for`` seconds before a call fails. A process that,
while it stops, made each of its storage calls in turn (deregistering workers,
releasing a dead process's claims, reading the final counts) would wait that
long for every one of them: minutes, for a fleet of many workers on a dead
server. Instead the calls of one job share one ``WaitBudget`` of that many
seconds (``retry_window``): calls made side by side spend it once, and once it
is spent, or cut short by a signal, the remaining calls are not made. What
they would have put back comes back on its own when its lease expires, and
the caller reports it.

>>> import asyncio
>>> async def demo():
...     budget = WaitBudget(5.0, "the demo")
...     async def answer():
...         return 42
...     first = await budget.call("a quick call", answer())
...     budget.cut()
...     try:
...         await budget.call("another call", answer())
...     except StorageUnavailable as exc:
...         return first, str(exc)
>>> asyncio.run(demo())
(42, 'not waiting for storage any longer during the demo (another call): stopped on request')
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from workhive.errors import StorageUnavailable

__all__ = ["DEFAULT_RETRY_WINDOW", "MIN_RETRY_WINDOW", "WaitBudget", "open_within_window", "retry_window"]

T = TypeVar("T")

log = logging.getLogger("workhive.runtime.patience")

#: how long a cancelled call gets to unwind before the caller moves on
UNWIND_SECONDS = 1.0

#: seconds waited on a backend that does not say how long it retries (memory, sqlite: their
#: calls fail fast or wait out a busy lock, well within this)
DEFAULT_RETRY_WINDOW = 30.0
#: the least a stop waits on storage, so that ``retry_for=0`` (fail at once) still lets a
#: healthy store take the stop's few calls
MIN_RETRY_WINDOW = 1.0


def retry_window(storage: object) -> float:
    """Seconds ``storage`` keeps retrying a lost connection: its ``retry_for``.

    Read from the backend (``storage.retry_for``) or its parsed URL
    (``storage.config.retry_for``, as the postgres and redis backends keep it);
    ``DEFAULT_RETRY_WINDOW`` for a backend that has none, and never less than
    ``MIN_RETRY_WINDOW``.

    >>> retry_window(object())
    30.0
    """
    for holder in (storage, getattr(storage, "config", None)):
        value = getattr(holder, "retry_for", None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return max(MIN_RETRY_WINDOW, float(value))
    return DEFAULT_RETRY_WINDOW


async def open_within_window(hive: Any, *, sleep: Any = asyncio.sleep, clock: Any = time.monotonic) -> None:
    """Open ``hive``, waiting out a store that does not answer for up to its ``retry_window``.

    A worker process that joins a running fleet (a replacement after a crash, a
    scale-up) opens its own connections: a network that stalls for a moment, or
    a server restarting, would otherwise end that process at once and, a few in
    a row, the fleet. What is not a passing fault (bad configuration, no hive, a
    corrupt store) raises at once; so does the last ``StorageUnavailable`` once
    the window is spent.
    """
    window = retry_window(hive.storage)
    deadline = clock() + window
    pause = 0.1
    while True:
        try:
            await hive.open()
            return
        except StorageUnavailable as exc:
            if clock() + pause > deadline:
                raise
            if pause == 0.1:  # once: the wait may last the whole window
                log.warning("storage is not reachable yet (%s); trying again for up to %gs", exc, window)
        await sleep(pause)
        pause = min(2.0, pause * 2)


class WaitBudget:
    """Seconds a job may spend waiting on storage, across all its calls.

    ``call`` runs one storage call within what is left; calls made side by side
    (``asyncio.gather``) spend the time they overlap once. A call still running
    when the budget runs out is cancelled, and every later call raises
    ``StorageUnavailable`` at once without being made. ``cut`` ends the budget
    now (an operator's signal): calls in flight are cancelled too.
    """

    def __init__(self, seconds: float, purpose: str) -> None:
        self.seconds = seconds
        self.purpose = purpose  # "the fleet stops": says in errors what the wait was for
        self.calls = 0  # calls made (not those refused because the budget was spent)
        self._left = seconds
        self._cut = False
        self._waiting = 0
        self._since = 0.0
        self._in_flight: set[asyncio.Future[Any]] = set()

    @property
    def left(self) -> float:
        """Seconds left to wait (0 once spent or cut)."""
        if self._cut:
            return 0.0
        left = self._left
        if self._waiting:
            left -= time.monotonic() - self._since
        return max(0.0, left)

    @property
    def spent(self) -> bool:
        """Nothing left: later calls are refused."""
        return self.left <= 0.0

    @property
    def waiting(self) -> bool:
        """A call is in flight."""
        return self._waiting > 0

    @property
    def cut_short(self) -> bool:
        """``cut`` was called (rather than the time running out)."""
        return self._cut

    def cut(self) -> None:
        """Wait no longer: cancel the calls in flight and refuse every later one."""
        self._cut = True
        for future in list(self._in_flight):
            future.cancel()

    def _refused(self, what: str) -> StorageUnavailable:
        why = "stopped on request" if self._cut else f"its {self.seconds:g}s (the storage's retry_for) are spent"
        return StorageUnavailable(f"not waiting for storage any longer during {self.purpose} ({what}): {why}")

    async def call(self, what: str, awaitable: Awaitable[T]) -> T:
        """The result of ``awaitable`` (a storage call, described by ``what``), or ``StorageUnavailable``.

        Raises ``StorageUnavailable`` without running it when the budget is
        spent or cut, and cancels it when the budget runs out while it runs.
        Whatever the call itself raises propagates.
        """
        if self.spent:
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never started: no "was never awaited" warning
            raise self._refused(what)
        future: asyncio.Future[T] = asyncio.ensure_future(awaitable)
        self.calls += 1
        if not self._waiting:
            self._since = time.monotonic()
        self._waiting += 1
        self._in_flight.add(future)
        try:
            done, _ = await asyncio.wait({future}, timeout=self.left)
        except asyncio.CancelledError:
            future.cancel()
            raise
        finally:
            self._in_flight.discard(future)
            self._waiting -= 1
            if not self._waiting:
                self._left -= time.monotonic() - self._since
        if not done or future.cancelled():
            future.cancel()
            # Let it unwind (drop its connection) before the caller moves on, but never wait long:
            # a call that ignores its cancellation is left to finish on its own.
            future.add_done_callback(_retrieve)
            await asyncio.wait({future}, timeout=UNWIND_SECONDS)
            if not self._cut:
                self._left = 0.0
            raise self._refused(what)
        return future.result()


def _retrieve(future: asyncio.Future[Any]) -> None:
    # A cancelled call may still end in an error while it unwinds: nobody waits for it, so read
    # it here rather than have asyncio warn that it was never retrieved.
    if not future.cancelled():
        future.exception()
