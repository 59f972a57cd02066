"""The base of the storage contract suite: hooks, capability flags, fixtures and helpers.

Every rule family (``push.py``, ``claim.py``, ...) is a mixin of ``ContractBase``;
``workhive.testing.storage.StorageContract`` combines them. A backend's tests
override the hooks (``make_backend``, ``make_missing_backend``,
``multiprocess_store``) and, where needed, the flags (``supports_manual_clock``,
``real_time_lease``, ``clock_drift``) on their ``StorageContract`` subclass.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from workhive.hive import Hive
from workhive.models import WorkItem
from workhive.plugin_manager import PluginManager
from workhive.pool import Pool
from workhive.storage import StorageBackend
from workhive.testing.clock import ManualClock

__all__ = ["ContractBase"]


class ContractBase:
    """What every rule family shares: the hooks a backend's tests override, the capability flags,
    the fixtures, and the helpers the tests use. ``StorageContract`` mixes the families together."""

    #: the backend honours an injected clock (else tests wait in real time)
    supports_manual_clock: ClassVar[bool] = True
    #: a lease long enough for a test step, in seconds; time-dependent tests
    #: let 1.5 of these pass (by hand, or by sleeping when the clock is real)
    real_time_lease: ClassVar[float] = 1.0
    #: 0 when the backend runs on the ManualClock itself (``clock=``). A server backend that takes
    #: ``clock_offset=clock.offset`` sets the most real seconds one test may take: its server's clock
    #: keeps running, so times are compared within this much and exact-boundary tests skip.
    clock_drift: ClassVar[float] = 0.0

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> StorageBackend:
        """Return an unopened backend; use ``clock`` as its clock when it is not None."""
        raise NotImplementedError("override make_backend() in your StorageContract subclass")

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> StorageBackend:
        """Return an unopened backend for the same store ``make_backend(clock, tmp_path)`` opens, with ``create=False``.

        The contract test calls it first on a place where no hive exists
        (opening must raise ``HiveNotFound`` and create nothing), then again
        once ``make_backend`` has created the hive (it must open that hive).
        """
        raise NotImplementedError(
            "override make_missing_backend() in your StorageContract subclass: the same store as make_backend(), "
            "built with create=False"
        )

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        """How another process opens one store: ``workhive.open(url, **options)`` (options must pickle).

        Only called when the backend declares ``"multiprocess"``; the store
        must be fresh and must live under ``tmp_path`` (or a private namespace
        of yours). The suite opens it in the test process and in each worker
        process (started with ``spawn``, so the plugin must be installed).
        """
        raise NotImplementedError(
            "the backend declares 'multiprocess': override multiprocess_store() to return the URL (and picklable "
            "factory options) by which another process opens the same store"
        )

    # -- fixtures -----------------------------------------------------------
    @pytest.fixture
    def clock(self) -> ManualClock | None:
        return ManualClock() if self.supports_manual_clock else None

    @pytest_asyncio.fixture
    async def hive(self, clock: ManualClock | None, tmp_path: pathlib.Path) -> Any:
        async with Hive(self.make_backend(clock, tmp_path), manager=PluginManager(entry_points=False)) as hive:
            yield hive

    @pytest.fixture
    def lease(self, clock: ManualClock | None) -> float:
        """A lease that expires after ``elapse(lease * 1.5)``."""
        return 10.0 if clock is not None else self.real_time_lease

    async def elapse(self, clock: ManualClock | None, seconds: float) -> None:
        """Let ``seconds`` pass on the backend's clock."""
        if clock is not None:
            clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    # -- helpers ------------------------------------------------------------
    @staticmethod
    async def must_claim(pool: Pool, worker_id: str = "w1", lease: float | None = None) -> WorkItem:
        item = await pool.claim(worker_id, lease=lease)
        assert item is not None, "expected an item to be claimable"
        return item

    async def superseded_claim(self, pool: Pool, clock: ManualClock | None, lease: float) -> tuple[WorkItem, WorkItem]:
        """Push one item and return (a claim whose lease expired, the claim that took the item over)."""
        await pool.push("x")
        stale = await self.must_claim(pool, "w1", lease=lease)
        await self.elapse(clock, lease * 1.5)
        return stale, await self.must_claim(pool, "w2", lease=lease * 20)

    @staticmethod
    async def raw(hive: Hive, pool: str, item_id: str) -> WorkItem:
        item = await hive.storage.get(pool, item_id)
        assert item is not None, f"item {item_id} vanished from the backend"
        return item

    # -- helpers used by several families ---------------------------------

    def needs_manual_clock(self, clock: ManualClock | None) -> ManualClock:
        """The clock, or skip: the test checks an exact boundary that a running clock cannot hit."""
        if clock is None or self.clock_drift:
            pytest.skip("checks an exact time boundary: needs a backend on the ManualClock itself")
        return clock

    def within(self, seen: float | None, earliest: float, latest: float) -> bool:
        """A backend time lies between two readings of the backend's clock taken around the operation
        that set it (shifted as the rule says; widened by ``clock_drift`` when the server's clock runs).

        Bracketing, not "equal to a reading taken afterwards within 0.1 s": on a loaded machine an
        await can take longer than any fixed tolerance, and the rule is about the time, not the speed.
        """
        slack = self.clock_drift or 1e-6
        return seen is not None and earliest - slack <= seen <= latest + slack

    def same_time(self, seen: float | None, want: float) -> bool:
        """A backend time equals an expected one (within ``clock_drift`` when the server's clock runs)."""
        return seen is not None and (seen == want if not self.clock_drift else abs(seen - want) <= self.clock_drift)

    async def _snapshot(self, hive: Hive) -> tuple[Any, ...]:
        pools = await hive.pools()
        return (pools, [await hive.storage.stats(p) for p in pools])
