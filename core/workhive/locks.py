"""The lock contract: named locks with fencing tokens.

``async with hive.lock("repo:acme", ttl=300) as lock:`` serialises work on a
shared resource across worker processes; ``lock.token`` rises with every
acquisition of the name, so the resource can refuse a stale holder's writes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs

__all__ = ["HeldLock", "LockHolder", "LockProvider"]


@attrs.frozen
class LockHolder:
    """Who holds (or last held) a lock, as waiters and ``workhive locks`` see it."""

    name: str
    token: int
    pid: int
    host: str
    worker_id: str | None
    acquired_at: float
    ttl: float | None

    def overdue(self, now: float) -> bool:
        """True when the holder is past its ttl (it is reported, never broken)."""
        return self.ttl is not None and now > self.acquired_at + self.ttl


@attrs.frozen
class HeldLock:
    """A lock the caller holds; pass it back to ``release``."""

    name: str
    token: int
    acquired_at: float
    ttl: float | None
    handle: object = attrs.field(default=None, repr=False, eq=False)


@runtime_checkable
class LockProvider(Protocol):
    """What a ``workhive_locks`` factory returns."""

    async def acquire(
        self, name: str, *, ttl: float | None, timeout: float | None, worker_id: str | None
    ) -> HeldLock: ...

    async def release(self, lock: HeldLock) -> None: ...

    async def holder(self, name: str) -> LockHolder | None: ...

    async def list_locks(self) -> list[LockHolder]: ...

    async def close(self) -> None: ...
