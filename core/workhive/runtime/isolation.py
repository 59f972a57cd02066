"""Finding the item that kills its worker process without poisoning the items beside it.

When a process dies with several items running (``--concurrency`` > 1), the
supervisor cannot tell which one killed it. Rather than spend an attempt of
each (and put them back beside the killer, to be killed again), it gives every
one of them its attempt back and marks it a *suspect* in shared state
(``SUSPECTS``). A worker that claims a suspect runs it alone in its process:
no other item starts while it runs, and it starts only once the others have
finished. If the process dies then, the culprit is known — the supervisor
spends that item's attempt, and after ``max_attempts`` it is poisoned — while
the innocent suspects simply finish.

>>> gate = IsolationGate()
>>> async def demo():
...     async with gate.shared():
...         pass
...     async with gate.exclusive():
...         return gate.running
>>> import asyncio; asyncio.run(demo())
1
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

__all__ = ["IsolationGate", "SUSPECTS", "SUSPECT_TTL", "suspect_key"]

#: the shared-state namespace of items that were running in a process that died beside others
SUSPECTS = "workhive-suspects"
#: a mark outlives any sensible retry schedule, then expires on its own
SUSPECT_TTL = 7 * 86400.0


def suspect_key(pool: str, item_id: str) -> str:
    return f"{pool}/{item_id}"


class IsolationGate:
    """Items of one process run side by side (``shared``) unless one must run alone (``exclusive``).

    An exclusive entrant waits for the running items to finish and keeps new ones
    from starting meanwhile (so a stream of ordinary items cannot starve it).
    """

    def __init__(self) -> None:
        self.running = 0
        self._exclusive = False
        self._waiting_exclusive = 0
        self._changed = asyncio.Event()

    @property
    def exclusive_wanted(self) -> bool:
        """An item runs alone, or waits to: nothing new may start (read from any thread)."""
        return self._exclusive or self._waiting_exclusive > 0

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            await self._changed.wait()

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        """Run beside other ordinary items; wait while an item runs, or waits to run, alone."""
        await self._until(lambda: not self._exclusive and not self._waiting_exclusive)
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._notify()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Run alone: once nothing else runs, and with nothing else starting until the block ends."""
        self._waiting_exclusive += 1
        try:
            await self._until(lambda: not self._exclusive and self.running == 0)
        finally:
            self._waiting_exclusive -= 1
            self._notify()
        self._exclusive = True
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._exclusive = False
            self._notify()
