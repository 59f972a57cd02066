"""Calls in flight per API key across the fleet: ``concurrency`` named lock slots per key.

A key whose budget says ``concurrency=N`` (``env:KEY?concurrency=8``) gets N
named locks on the hive's lock provider, ``workhive-key-slot:NAME#fp:0`` …
``:N-1``. A call holds one of them from before it goes until its answer is in,
so at most N calls are in flight with the key, on every machine that shares
the lock provider (the storage's own locks on PostgreSQL, Redis and memory;
flock on one machine with SQLite). A holder that dies mid-call gives its slot
back the way the provider frees any lock of a dead holder: the kernel closes
the flock, PostgreSQL ends the session's advisory lock, Redis lets the
unrenewed lease lapse. Nothing here has to notice the death.

Waiting costs no polling: a process holds at most N of a key's slots (its
other workers wait on an ``asyncio.Semaphore``, no round trip), and a worker
that found every slot taken blocks in the provider's own wait on one of them
(woken by the server, the kernel or a pub/sub message), looking at the others
again every ``WAIT_SLICE`` seconds.

>>> slots = KeySlots(hive.locks(), pool.credentials())  # doctest: +SKIP
>>> slot = await slots.take(credential)  # doctest: +SKIP
>>> try:  # doctest: +SKIP
...     await call_api(credential)
... finally:
...     await slots.give_back(slot)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from workhive.errors import LockNotHeld, LockTimeout

if TYPE_CHECKING:
    from workhive.credentials import Credential
    from workhive.hive import Hive
    from workhive.locks import HeldLock, LockProvider

__all__ = ["KeySlot", "KeySlots", "build_slots", "slot_lock_name"]

log = logging.getLogger("workhive.runtime.key_slots")

#: seconds a worker blocks on one taken slot before it looks at all of them again
WAIT_SLICE = 1.0
#: the lock-name prefix of key slots (``workhive locks`` lists them under it)
SLOT_PREFIX = "workhive-key-slot:"


def slot_lock_name(credential: Credential, index: int) -> str:
    """The lock that is slot ``index`` of ``credential`` (its name and fingerprint, never its secret).

    The fingerprint keeps a key replaced under the same name out of the old one's slots.

    >>> from workhive.credentials import Credential
    >>> slot_lock_name(Credential("KEY", "sk-1"), 0).startswith("workhive-key-slot:KEY#")
    True
    """
    return f"{SLOT_PREFIX}{credential.name}#{credential.secret.fingerprint()[:8]}:{index}"


@attrs.define
class KeySlot:
    """One held slot of a key: give it back with ``KeySlots.give_back``."""

    credential: Credential
    index: int
    held: HeldLock = attrs.field(repr=False)
    returned: bool = attrs.field(default=False, repr=False)  # its local gate was given back


class KeySlots:
    """The fleet-wide in-flight caps of a process's keys (keys without ``budget.concurrency`` are not capped).

    ``locks`` is the hive's lock provider (``hive.locks()``); every process of
    the fleet must use the same one, which ``workhive work`` does.
    """

    def __init__(
        self,
        locks: LockProvider,
        credentials: Sequence[Credential],
        *,
        worker_id: str | None = None,
        wait_slice: float = WAIT_SLICE,
    ) -> None:
        self._locks = locks
        self._worker_id = worker_id
        self.wait_slice = wait_slice
        self._limits: dict[str, int] = {}
        for credential in credentials:
            budget = credential.budget
            if budget is not None and budget.concurrency is not None:
                self._limits[credential.name] = budget.concurrency
        self._gates: dict[str, asyncio.Semaphore] = {}
        self._next: dict[str, int] = {}

    @property
    def active(self) -> bool:
        """Whether any key has a fleet-wide concurrency limit."""
        return bool(self._limits)

    def limit(self, credential: Credential) -> int | None:
        """The calls ``credential`` may have in flight across the fleet (None: no limit)."""
        return self._limits.get(credential.name)

    async def take(self, credential: Credential) -> KeySlot | None:
        """Wait for a free slot of ``credential`` and hold it (None at once when the key has no limit).

        Cancelling the wait leaves nothing held. Errors of the lock mechanism
        (``LockSystemError``) propagate: a call must not go uncounted.
        """
        limit = self._limits.get(credential.name)
        if limit is None:
            return None
        gate = self._gates.get(credential.name)
        if gate is None:
            gate = self._gates[credential.name] = asyncio.Semaphore(limit)
        await gate.acquire()
        try:
            return await self._take_slot(credential, limit)
        except BaseException:
            gate.release()
            raise

    async def _take_slot(self, credential: Credential, limit: int) -> KeySlot:
        # Start where this process's last search ended: its workers spread over the slots
        # instead of all trying slot 0 first.
        start = self._next.get(credential.name, 0)
        while True:
            for step in range(limit):
                index = (start + step) % limit
                held = await self._try(credential, index, timeout=0)
                if held is not None:
                    self._next[credential.name] = (index + 1) % limit
                    return KeySlot(credential, index, held)
            # All taken: block in the provider's own wait (no polling) on one, then look again.
            held = await self._try(credential, start, timeout=self.wait_slice)
            if held is not None:
                self._next[credential.name] = (start + 1) % limit
                return KeySlot(credential, start, held)
            start = (start + 1) % limit

    async def _try(self, credential: Credential, index: int, *, timeout: float) -> HeldLock | None:
        try:
            return await self._locks.acquire(
                slot_lock_name(credential, index), ttl=None, timeout=timeout, worker_id=self._worker_id
            )
        except LockTimeout:
            return None

    async def give_back(self, slot: KeySlot | None) -> None:
        """Free ``slot`` for the next call (None: nothing was held). Giving one back twice is a no-op."""
        if slot is None:
            return
        try:
            await self._locks.release(slot.held)
        except LockNotHeld:
            log.debug("slot %d of %s was already given back", slot.index, slot.credential.name)
            return
        finally:
            # Also when the release failed: the provider frees a lost holder's lock, and a
            # local gate never given back would shrink this process's share for good.
            if not slot.returned:
                slot.returned = True
                gate = self._gates.get(slot.credential.name)
                if gate is not None:
                    gate.release()


def build_slots(credentials: Sequence[Credential] | None, hive: Hive, worker_id: str | None = None) -> KeySlots | None:
    """The process's ``KeySlots`` when a key has a ``concurrency`` budget, else None (nothing to keep).

    >>> build_slots(pool.credentials(), hive)  # doctest: +SKIP
    """
    if not credentials:
        return None
    if not any(c.budget is not None and c.budget.concurrency is not None for c in credentials):
        return None
    return KeySlots(hive.locks(), credentials, worker_id=worker_id)
