"""``HiveHandle``: one workhive hive behind the flatmachines adapters, opened and closed on its own.

flatmachines' backends have no ``open`` or ``close``: a machine builds its
hooks, calls actions, and its process ends. So the handle opens the hive in
the event loop of the first call, and closes it when that loop shuts down:
``asyncio.run`` (what ``python -m flatmachines.run`` uses) closes every
suspended async generator before it closes the loop
(``loop.shutdown_asyncgens``), and the handle parks one there whose
``finally`` closes the hive. Without that, SQLite's connection thread would
keep the interpreter from exiting. A loop that ends without
``shutdown_asyncgens`` leaves the hive to be reopened by the next loop that
uses the handle; ``aclose()`` closes it explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import workhive
from workhive.errors import StorageUnavailable
from workhive.locks import HeldLock
from workhive_flatmachines.keeper import LeaseKeeper

__all__ = ["HiveHandle", "open_handle", "resolve_storage", "shared_handle"]

log = logging.getLogger("workhive_flatmachines")


class HiveHandle:
    """A ``workhive.Hive`` opened lazily in the running loop; closed when that loop shuts down.

    ``storage`` is a workhive storage URL (``options`` go to ``workhive.open``)
    or a ``Hive`` you own (opened if needed, never closed by the handle).

    >>> handle = HiveHandle("sqlite:///data/workers.db", lease=120)  # doctest: +SKIP
    >>> hive = await handle.hive()  # doctest: +SKIP
    """

    def __init__(self, storage: str | workhive.Hive, *, heartbeat_every: float | None = None, **options: Any) -> None:
        if isinstance(storage, workhive.Hive):
            if options:
                raise workhive.InvalidArgument(
                    f"options {sorted(options)} apply to a storage URL; a Hive passed in keeps its own settings"
                )
            self._hive, self._owned = storage, False
        elif isinstance(storage, str) and storage:
            # Built now (plugin lookup, URL parsing): a bad URL fails while the machine loads, not mid-job.
            self._hive, self._owned = workhive.open(storage, **options), True
        else:
            raise workhive.ConfigError(
                f"storage must be a workhive storage URL (e.g. 'sqlite:///data/workers.db') or a Hive, got {storage!r}"
            )
        every = self._hive.lease / 3 if heartbeat_every is None else heartbeat_every
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not 0 < every < self._hive.lease:
            raise workhive.InvalidArgument(
                f"heartbeat_every must be a number of seconds above 0 and below the lease ({self._hive.lease:g}s), "
                f"got {heartbeat_every!r}: a lease must be renewed before it runs out"
            )
        self.heartbeat_every = float(every)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Future[None] | None = None
        self._closer: AsyncIterator[None] | None = None
        self._keeper: LeaseKeeper | None = None
        #: execution locks this process holds through the handle, by execution id (see checkpoints)
        self.held_executions: dict[str, HeldLock] = {}

    def __repr__(self) -> str:
        return f"<HiveHandle {self._hive.storage_url or self._hive.storage!r}>"

    @property
    def lease(self) -> float:
        """Seconds a claim's lease lasts without a heartbeat."""
        return self._hive.lease

    @property
    def max_attempts(self) -> int:
        return self._hive.max_attempts

    def pool_name_check(self, name: str) -> None:
        """Refuse a pool name workhive cannot store (``InvalidName``), before any call."""
        self._hive.pool(name)

    async def hive(self) -> workhive.Hive:
        """The hive, open in the running event loop."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            await self._adopt(loop)
        ready = self._ready
        assert ready is not None
        if not ready.done():
            await asyncio.shield(ready)
        ready.result()  # re-raises why the open failed
        return self._hive

    async def keeper(self) -> LeaseKeeper:
        """The lease keeper of the running loop (background heartbeats for claims held)."""
        hive = await self.hive()
        if self._keeper is None:
            self._keeper = LeaseKeeper(hive, self.heartbeat_every)
        return self._keeper

    async def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        old = self._loop
        if old is not None and old.is_running():
            raise StorageUnavailable(
                f"{self!r} is in use by an event loop running in another thread; give each thread its own hooks",
            )
        self._loop, self._keeper, self._closer = loop, None, None
        self._ready = ready = loop.create_future()
        try:
            if old is not None and self._owned:
                # That loop ended without shutdown_asyncgens: its hive was never closed.
                with contextlib.suppress(Exception):
                    await self._hive.close()
            await self._hive.open()
            closer = self._close_at_shutdown()
            await closer.__anext__()
            self._closer = closer
        except BaseException as exc:
            self._loop = None
            ready.set_exception(exc)
            ready.exception()  # retrieved: whoever awaits it re-raises it
            raise
        ready.set_result(None)

    async def _close_at_shutdown(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            await keeper.stop()
        if self._owned:
            try:
                await self._hive.close()
            except Exception:  # at loop shutdown there is no caller left to raise to
                log.warning("closing %r failed", self, exc_info=True)

    async def aclose(self) -> None:
        """Stop the background heartbeats and close the hive now (for loops you manage yourself)."""
        closer, self._closer = self._closer, None
        if closer is not None and self._loop is asyncio.get_running_loop():
            await closer.aclose()  # type: ignore[attr-defined]
        else:
            await self._shutdown()
        self._loop = None


def resolve_storage(storage: str | None, options: dict[str, Any]) -> str:
    """The storage URL to use: ``storage``, else workhive's own settings, as the CLI resolves them.

    ``None`` reads ``WORKHIVE_STORAGE`` (then ``workhive.toml``, then
    ``sqlite:///.workhive/hive.db``), and fills ``options["locks"]`` the same
    way, so a machine and ``workhive status`` in one directory see one hive.
    """
    if storage is not None:
        return storage
    from workhive.config import load_config

    config = load_config()
    options.setdefault("locks", config["locks"])
    return str(config["storage"])


_SHARED: dict[tuple[int, str, tuple[tuple[str, Any], ...]], HiveHandle] = {}


def shared_handle(storage: str | None = None, **options: Any) -> HiveHandle:
    """The one ``HiveHandle`` of this thread for a storage URL and options (made on first use).

    Every hooks object, backend, checkpoint store and lock built from the same
    URL in one thread shares it: one hive, one connection pool, one lease
    keeper, however many states or machines ask for it. Per thread, because a
    handle serves one event loop at a time and each thread runs its own.

    >>> shared_handle("memory://jobs") is shared_handle("memory://jobs")
    True
    """
    # None means "the default" for every option: one key for a setting given as None or left out.
    options = {name: value for name, value in options.items() if value is not None}
    url = resolve_storage(storage, options)
    try:
        key = (threading.get_ident(), url, tuple(sorted(options.items())))
        hash(key)
    except TypeError:  # an unhashable option: a handle of its own
        return HiveHandle(url, **options)
    handle = _SHARED.get(key)
    if handle is None:
        handle = _SHARED[key] = HiveHandle(url, **options)
    return handle


def open_handle(storage: str | workhive.Hive | HiveHandle | None, options: dict[str, Any]) -> HiveHandle:
    """The handle for what a backend was given: a handle as is, a Hive wrapped, a URL (or None) the shared one."""
    if isinstance(storage, HiveHandle):
        if options:
            raise workhive.InvalidArgument(
                f"options {sorted(options)} apply to a storage URL; a HiveHandle passed in keeps its own settings"
            )
        return storage
    if isinstance(storage, workhive.Hive):
        return HiveHandle(storage, **options)
    return shared_handle(storage, **options)
