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
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from workhive.errors import WorkhiveError
from workhive.models import WorkItem
from workhive.shared_state import SharedState

__all__ = ["IsolationGate", "SUSPECTS", "SUSPECT_TTL", "Suspects", "suspect_key"]

log = logging.getLogger("workhive.runtime.isolation")

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
        self._shared = _Shared(self)  # stateless: one for every item that runs beside others
        #: how many items have begun to run alone: an item announced before one did is announced again
        self.exclusive_runs = 0

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

    def shared(self) -> contextlib.AbstractAsyncContextManager[bool]:
        """Run beside other ordinary items; wait while an item runs, or waits to run, alone (yields False)."""
        return self._shared

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
        self.exclusive_runs += 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._exclusive = False
            self._notify()


class Suspects:
    """The crash suspects of one pool as a worker process sees them: which to run alone, and clearing them."""

    def __init__(self, store: SharedState, pool: str) -> None:
        self._store = store
        self._pool = pool

    async def is_suspect(self, item: WorkItem) -> bool:
        """Was ``item`` running in a process that died beside other items (so it must run alone)?

        Only items given back at least once can be: the supervisor refunds suspects, which
        counts as a release, so the common path costs no storage call.
        """
        if item.releases == 0:
            return False
        try:
            return await self._store.get(suspect_key(self._pool, item.id)) is not None
        except WorkhiveError as exc:
            log.warning("cannot tell whether item %s is a crash suspect (%s); running it alone", item.id, exc)
            return True

    async def clear(self, item: WorkItem) -> None:
        """Forget a suspect that ran alone without taking its process down (best effort: marks expire)."""
        try:
            await self._store.delete(suspect_key(self._pool, item.id))
        except WorkhiveError as exc:
            log.debug("clearing the crash-suspect mark of %s failed: %s", item.id, exc)

    def admit(self, gate: IsolationGate, item: WorkItem) -> contextlib.AbstractAsyncContextManager[bool]:
        """Run ``item`` through ``gate``: alone if it is a suspect (yields True), else beside the others.

        A suspect whose block ends normally ran alone and its process lived: it is not
        the killer, and its mark is cleared (after the gate lets others run again).
        An item never given back cannot be a suspect (``is_suspect``): it enters the
        gate's shared side at once, with no object of its own.
        """
        if item.releases == 0:
            return gate.shared()
        return _Admission(self, gate, item)


class _Shared:
    """``IsolationGate.shared()``: one plain object per gate, holding no state of an entrant, so shared by all."""

    __slots__ = ("_gate",)

    def __init__(self, gate: IsolationGate) -> None:
        self._gate = gate

    async def __aenter__(self) -> bool:
        gate = self._gate
        if gate._exclusive or gate._waiting_exclusive:
            await gate._until(lambda: not gate._exclusive and not gate._waiting_exclusive)
        gate.running += 1
        return False  # not alone

    async def __aexit__(self, *exc_info: object) -> None:
        gate = self._gate
        gate.running -= 1
        if gate._waiting_exclusive:
            # Only an item waiting to run alone waits on the running count (shared entrants wait
            # for the exclusive side, which notifies as it ends): no new Event per item otherwise.
            gate._notify()


class _Admission:
    """``Suspects.admit()``: a plain object, not a generator, since every item in flight holds one."""

    __slots__ = ("_alone", "_gate", "_inner", "_item", "_suspects")

    def __init__(self, suspects: Suspects, gate: IsolationGate, item: WorkItem) -> None:
        self._suspects = suspects
        self._gate = gate
        self._item = item
        self._alone = False
        self._inner: contextlib.AbstractAsyncContextManager[Any] | None = None

    async def __aenter__(self) -> bool:
        self._alone = await self._suspects.is_suspect(self._item)
        self._inner = self._gate.exclusive() if self._alone else self._gate.shared()
        await self._inner.__aenter__()
        return self._alone

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._inner is not None
        await self._inner.__aexit__(*exc_info)
        # Ended normally: a suspect that ran alone did not take its process down.
        if self._alone and exc_info[0] is None:
            await self._suspects.clear(self._item)
