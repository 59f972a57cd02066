"""``Hive``: the facade a user holds; ``open()`` builds one from URLs."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from workhive.backoff import BackoffStrategy, from_spec
from workhive.defaults import DEFAULT_BACKOFF, DEFAULT_LOCKS, DEFAULT_STORAGE, default_locks_url
from workhive.locks import HeldLock, LockProvider
from workhive.plugin_manager import PluginManager, default_manager
from workhive.pool import Pool
from workhive.schedules import Schedules
from workhive.shared_state import SharedState
from workhive.storage import StorageBackend, check_backend
from workhive.urls import parse_spec, scheme_of
from workhive.validation import check_count, check_name, check_positive
from workhive.workers import Workers

__all__ = ["DEFAULT_LOCKS", "DEFAULT_STORAGE", "Hive", "open"]


class Hive:
    """A storage backend plus locks, backoff and plugins, opened together.

    Use ``workhive.open(url)`` to build one; ``Hive(backend)`` wraps a backend
    you constructed yourself (tests, custom set-ups).

    >>> async def main():  # doctest: +SKIP
    ...     async with workhive.open("sqlite:///.workhive/hive.db") as hive:
    ...         await hive.pool("emails").push({"to": "a@example.com"})
    """

    def __init__(
        self,
        storage: StorageBackend,
        *,
        locks: LockProvider | str | None = None,
        backoff: BackoffStrategy | str = DEFAULT_BACKOFF,
        manager: PluginManager | None = None,
        lease: float = 60.0,
        max_attempts: int = 5,
        reap_after: float = 60.0,
        storage_url: str | None = None,
    ) -> None:
        check_backend(storage)  # every gap named now, not one at a time on first use
        self.manager = manager if manager is not None else default_manager()
        self.storage = storage
        self.storage_url = storage_url
        self.lease = check_positive("lease", lease)
        self.max_attempts = check_count("max_attempts", max_attempts)
        self.reap_after = check_positive("reap_after", reap_after)
        self.backoff: BackoffStrategy = self._backoff(backoff) if isinstance(backoff, str) else backoff
        self._locks_spec = locks
        self._locks: LockProvider | None = locks if not isinstance(locks, (str, type(None))) else None
        self._pools: dict[str, Pool] = {}
        self.workers = Workers(self)
        self.anonymous_worker_id = f"{socket.gethostname()}-{os.getpid()}"
        self._open = False

    def _backoff(self, spec: str) -> BackoffStrategy:
        name, params = parse_spec(spec)
        return from_spec(self.manager.get("backoff", name), spec, params)

    # -- lifecycle ----------------------------------------------------------
    async def open(self) -> Hive:
        if not self._open:
            await self.storage.open()
            self._open = True
        return self

    async def close(self) -> None:
        if self._open:
            self._open = False
            try:
                if self._locks is not None:
                    await self._locks.close()
            finally:
                await self.storage.close()

    async def __aenter__(self) -> Hive:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- pools --------------------------------------------------------------
    def pool(self, name: str) -> Pool:
        """The pool called ``name`` (created on first push). Names: letters, digits, . _ : -"""
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[check_name("pool", name)] = Pool(self, name)
        return pool

    async def pools(self) -> list[str]:
        """Names of every pool that has items."""
        return await self.storage.pools()

    async def now(self) -> float:
        """The backend's clock (seconds since the epoch)."""
        return await self.storage.now()

    def shared(self, namespace: str) -> SharedState:
        """A fleet-wide key/value area (with expiry) on this hive's storage."""
        return SharedState(self.storage, namespace)

    def schedules(self) -> Schedules:
        """This hive's schedules (``workhive.schedules``): add, list, remove, fire what is due.

        >>> await hive.schedules().add("poll", "feeds", every="30s")  # doctest: +SKIP
        """
        return Schedules(self)

    # -- locks --------------------------------------------------------------
    def locks(self) -> LockProvider:
        """The lock provider, created on first use: the ``locks=`` URL, else the storage's default.

        The default is the storage's own locks when its plugin provides them (PostgreSQL,
        Redis, memory: the storage URL, same namespace), else ``fcntl:///.workhive/locks``;
        see ``workhive.defaults.default_locks_url``.
        """
        if self._locks is None:
            spec = self._locks_spec
            if spec is None:
                spec = default_locks_url(self.storage_url, self.manager)
            assert isinstance(spec, str)
            self._locks = self.manager.get("locks", scheme_of(spec, "lock URL")).factory(spec)
        return self._locks

    @contextlib.asynccontextmanager
    async def lock(
        self, name: str, *, ttl: float | None = None, timeout: float | None = None, worker_id: str | None = None
    ) -> AsyncIterator[HeldLock]:
        """Hold the named lock for the block; yields it with its fencing ``token``.

        ``timeout=None`` waits forever, ``0`` tries once (``LockTimeout`` names the holder).
        """
        provider = self.locks()
        held = await provider.acquire(name, ttl=ttl, timeout=timeout, worker_id=worker_id)
        try:
            yield held
        finally:
            await provider.release(held)


def open(
    storage: str | StorageBackend = DEFAULT_STORAGE,
    *,
    locks: str | LockProvider | None = None,
    backoff: str | BackoffStrategy = DEFAULT_BACKOFF,
    manager: PluginManager | None = None,
    lease: float = 60.0,
    max_attempts: int = 5,
    reap_after: float = 60.0,
    **options: Any,
) -> Hive:
    """Build a ``Hive`` from a storage URL (or backend); use it with ``async with``.

    ``options`` go to the storage plugin's factory.

    >>> hive = workhive.open("memory://")  # doctest: +SKIP
    """
    manager = manager if manager is not None else default_manager()
    if isinstance(storage, str):
        plugin = manager.get("storage", scheme_of(storage))
        backend = plugin.open(storage, **options)  # refuses options the plugin does not declare (F1)
        url: str | None = storage
    else:
        backend, url = storage, None
    return Hive(
        backend,
        locks=locks,
        backoff=backoff,
        manager=manager,
        lease=lease,
        max_attempts=max_attempts,
        reap_after=reap_after,
        storage_url=url,
    )
