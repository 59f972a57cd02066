"""Samples the store while the fleet runs: claims held too long, and whether anything still moves.

Every ``SAMPLE`` seconds (on its own connection, straight to the server) the
watcher lists the claimed items and remembers, by its own monotonic clock, when
it first saw each claim (item id + fencing token). A claim seen for longer than
``bound`` (lease + the storage's retry window + a generous grace) is a
violation: the fleet should have completed it, failed it or let its lease lapse
to another claim by then. Only the ``exempt`` item (the latch that holds the
pool open on purpose) may be held longer. Time the watcher is ``paused`` (no
fleet runs, or the server is down on purpose until the fleet gives up) does not
count: every claim's clock starts again when it resumes.

``last_change`` is when an item last finished (DONE or POISONED): a run with
items left in which none has finished for ``stall`` seconds will not end, even
if claims keep changing hands (attempts refunded forever).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

import workhive
from workhive.errors import WorkhiveError
from workhive.models import ItemState

__all__ = ["Held", "Watcher"]

SAMPLE = 0.1
T = TypeVar("T")


@attrs.frozen
class Held:
    """A claim the watcher saw held past its bound."""

    item_id: str
    token: int
    worker: str | None
    seen_for: float
    lease_expires_at: float | None
    attempts: int

    def describe(self, bound: float) -> str:
        return (
            f"item {self.item_id} stayed CLAIMED under token {self.token} by {self.worker} for "
            f"{self.seen_for:.0f}s and more (bound: lease + retry window + grace = {bound:.0f}s; "
            f"attempts {self.attempts}, lease_expires_at {self.lease_expires_at})"
        )


class Watcher:
    """See the module docstring."""

    def __init__(self, url: str, pool: str, bound: float) -> None:
        self.url = url
        self.pool = pool
        self.bound = bound
        self.exempt: set[str] = set()
        self.held: dict[tuple[str, int], Held] = {}
        self.finished = 0  # DONE + POISONED at the last good sample
        self.remaining = -1  # pending + delayed + claimed at the last good sample
        self.samples = 0
        self.failed_samples = 0
        self.last_change = time.monotonic()
        self._first_seen: dict[tuple[str, int], float] = {}
        self._finished_before = -1
        self._paused = 1  # until the first fleet starts (``resume``)
        self._hive: workhive.Hive | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._using: asyncio.Lock | None = None  # the handle's one user at a time (made on the watcher's loop)
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-watcher", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(timeout=60):
            raise RuntimeError("the watcher thread did not start")

    def resume(self) -> None:
        """Start timing claims (the first fleet runs)."""
        with self._lock:
            if self._paused:
                self._paused -= 1
            self._first_seen.clear()
            self.last_change = time.monotonic()

    def call(self, fn: Callable[[workhive.Hive], Awaitable[T]], timeout: float = 300) -> T:
        """Run ``fn(hive)`` on the watcher's own handle: the test process holds one handle on the
        store, never two (two SQLite handles in one process are a fault of their own, injected on purpose
        by the ``handles`` scenario, not by the harness)."""
        assert self._loop is not None

        async def go() -> T:
            assert self._using is not None
            async with self._using:  # one user of the handle at a time: a SQLite one is closed after each
                try:
                    return await fn(await self._open())
                except (WorkhiveError, OSError):
                    await self._drop()  # a cut connection: the next call opens afresh
                    raise
                finally:
                    await self._let_go()

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(go(), self._loop)
        return future.result(timeout=timeout)

    async def _open(self) -> workhive.Hive:
        if self._hive is None:
            hive = workhive.open(self.url)
            await hive.open()
            self._hive = hive
        return self._hive

    async def _let_go(self) -> None:
        """Close a SQLite handle after each use. An open one would hold a lock on the file that
        keeps short-lived processes from ever being its last user, and so hide what happens
        when they are (break 1 of issue 24: a process's locks dropped by a second handle)."""
        if self.url.startswith("sqlite"):
            await self._drop()

    async def _drop(self) -> None:
        if self._hive is not None:
            with contextlib.suppress(Exception):
                await self._hive.close()
            self._hive = None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    @contextlib.contextmanager
    def paused(self):  # type: ignore[no-untyped-def]
        """Claims are not timed inside the block; each one's clock restarts after it."""
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1
                self._first_seen.clear()
                self.last_change = time.monotonic()

    def stalled_for(self) -> float:
        return time.monotonic() - self.last_change

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._using = asyncio.Lock()
        self._ready.set()
        try:
            while not self._stop.is_set():
                async with self._using:
                    try:
                        await self._sample((await self._open()).pool(self.pool))
                    except (WorkhiveError, OSError):
                        self.failed_samples += 1  # the server is down or cut: sample again later
                        await self._drop()
                    finally:
                        await self._let_go()
                await asyncio.sleep(SAMPLE)
        finally:
            await self._drop()

    async def _sample(self, pool: Any) -> None:
        stats = await pool.stats()
        claimed = await pool.items(ItemState.CLAIMED, limit=100_000)
        now = time.monotonic()
        self.samples += 1
        with self._lock:
            self.finished = stats.done + stats.poisoned
            self.remaining = stats.pending + stats.delayed + stats.claimed
            if self.finished != self._finished_before:
                self._finished_before = self.finished
                self.last_change = now
            if self._paused:
                self._first_seen.clear()
                return
            current = {(i.id, i.token) for i in claimed}
            for key in list(self._first_seen):
                if key not in current:
                    del self._first_seen[key]
            for item in claimed:
                key = (item.id, item.token)
                first = self._first_seen.setdefault(key, now)
                if item.id in self.exempt or now - first <= self.bound:
                    continue
                self.held[key] = Held(
                    item.id, item.token, item.claimed_by, now - first, item.lease_expires_at, item.attempts
                )
