"""``MemoryLocks``: the lock contract inside one process (tests, notebooks).

``memory://`` is a private set of locks; ``memory://NAME`` is shared by every
``MemoryLocks`` of the process that uses the same NAME (and its tokens keep
rising across them). A release hands the lock to the longest waiter, woken
from any event loop or thread of the process, so a task that re-acquires at
once never starves the others; nothing is shared with other processes.

>>> async def main():  # doctest: +SKIP
...     locks = MemoryLocks("memory://")
...     held = await locks.acquire("repo", ttl=10, timeout=1, worker_id="w1")
...     await locks.release(held)
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time

from workhive.errors import LockNotHeld, LockSystemError
from workhive.locks import (
    HeldLock,
    LockHolder,
    check_lock_args,
    check_lock_name,
    lock_timeout_error,
    report_overdue,
)
from workhive.urls import redact_url
from workhive_memory.url import parse_lock_url

__all__ = ["MemoryLocks"]


class _Store:
    """The locks of one ``memory://`` URL: who holds what, the token counters, the waiters."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()  # loops in several threads may share a named store
        self.tokens: dict[str, int] = {}
        self.holders: dict[str, tuple[LockHolder, object]] = {}
        self.waiters: dict[str, list[asyncio.Future[None]]] = {}  # in arrival order
        # A released lock owed to the waiter holding this future: nobody else may take it.
        self.reserved: dict[str, asyncio.Future[None]] = {}

    def hand_on(self, name: str) -> None:
        """Owe a free lock to the longest waiter still waiting, and wake it (call with ``mutex`` held)."""
        self.reserved.pop(name, None)
        waiting = self.waiters.get(name, [])
        while waiting:
            future = waiting.pop(0)
            if future.done():
                continue
            try:
                future.get_loop().call_soon_threadsafe(_wake, future)
            except RuntimeError:  # its event loop is closed: that waiter is gone
                continue
            self.reserved[name] = future
            break
        if not waiting:
            self.waiters.pop(name, None)


_named: dict[str, _Store] = {}
_named_mutex = threading.Lock()


def _store_for(url: str) -> _Store:
    name = parse_lock_url(url)
    if name is None:
        return _Store()
    with _named_mutex:
        return _named.setdefault(name, _Store())


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class MemoryLocks:
    """In-process locks; see the module docstring for the URL forms."""

    #: a new provider on the same ``memory://NAME`` continues the tokens (within the process)
    persistent_tokens = True

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._store = _store_for(url)
        self._host = socket.gethostname()
        self._held: set[object] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryLocks({redact_url(self.url)!r})"

    def _try(
        self, name: str, ttl: float | None, worker_id: str | None, ticket: asyncio.Future[None] | None = None
    ) -> HeldLock | None:
        store = self._store
        with store.mutex:
            if name in store.holders:
                return None
            owed = store.reserved.get(name)
            if owed is not None and owed is not ticket:
                return None  # handed to a waiter that has not run yet
            if owed is None and store.waiters.get(name):
                return None  # others are queued: wait behind them
            store.reserved.pop(name, None)
            token = store.tokens.get(name, 0) + 1
            store.tokens[name] = token
            now = time.time()
            handle = object()
            holder = LockHolder(name, token, os.getpid(), self._host, worker_id, now, ttl)
            store.holders[name] = (holder, handle)
            self._held.add(handle)
            return HeldLock(name=name, token=token, acquired_at=now, ttl=ttl, handle=handle)

    async def acquire(
        self, name: str, *, ttl: float | None = None, timeout: float | None = None, worker_id: str | None = None
    ) -> HeldLock:
        """Take lock ``name``; ``timeout=None`` waits forever, ``0`` tries once (``LockTimeout`` names the holder)."""
        check_lock_args(name, ttl, timeout, worker_id)
        if self._closed:
            raise LockSystemError(f"{self!r} is closed; create a new provider")
        ttl_f = None if ttl is None else float(ttl)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        reported = False
        ticket: asyncio.Future[None] | None = None  # the future a release handed the lock to
        while True:
            held = self._try(name, ttl_f, worker_id, ticket)
            if held is not None:
                return held
            holder = await self.holder(name)
            if holder is not None and not reported and holder.overdue(time.time()):
                reported = True
                report_overdue(holder)
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise lock_timeout_error(name, holder, float(timeout or 0.0))
            future: asyncio.Future[None] = loop.create_future()
            store = self._store
            with store.mutex:
                if name not in store.holders and name not in store.reserved and not store.waiters.get(name):
                    continue  # released between our try and now
                store.waiters.setdefault(name, []).append(future)
            handed = False
            try:
                await asyncio.wait_for(asyncio.shield(future), remaining)
            except asyncio.TimeoutError:
                pass  # loop once more: the last try happens at the deadline
            finally:
                with store.mutex:
                    waiting = store.waiters.get(name, [])
                    if future in waiting:
                        waiting.remove(future)
                    if not waiting:
                        store.waiters.pop(name, None)
                    handed = store.reserved.get(name) is future
                    if handed and sys.exc_info()[0] is not None:
                        store.hand_on(name)  # cancelled after the lock was handed to us: pass it on
            ticket = future if handed else None

    async def release(self, lock: HeldLock) -> None:
        """Release ``lock``; ``LockNotHeld`` if it was released already or is not from this provider."""
        handle = lock.handle if isinstance(lock, HeldLock) else None
        name = lock.name if isinstance(lock, HeldLock) else lock
        if handle is None or handle not in self._held:
            raise LockNotHeld(
                f"lock {name!r} is not held by this provider (released already, or acquired elsewhere)", name=name
            )
        self._release(lock.name, handle)

    def _release(self, name: str, handle: object) -> None:
        store = self._store
        with store.mutex:
            self._held.discard(handle)
            current = store.holders.get(name)
            if current is not None and current[1] is handle:
                del store.holders[name]
                store.hand_on(name)

    async def holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` right now, or None."""
        check_lock_name(name)
        with self._store.mutex:
            current = self._store.holders.get(name)
        return current[0] if current is not None else None

    async def list_locks(self) -> list[LockHolder]:
        """Every lock currently held in this store, sorted by name."""
        with self._store.mutex:
            holders = [holder for holder, _ in self._store.holders.values()]
        return sorted(holders, key=lambda h: h.name)

    async def close(self) -> None:
        """Release every lock still held through this provider; it cannot be used afterwards."""
        self._closed = True
        with self._store.mutex:
            mine = [(name, handle) for name, (_, handle) in self._store.holders.items() if handle in self._held]
        for name, handle in mine:
            self._release(name, handle)
        self._held.clear()
