"""What is particular to the memory backend beyond the contract: its indexes stay small and claims stay cheap."""

from __future__ import annotations

import pytest

import workhive
from workhive.testing import ManualClock
from workhive_memory.backend import MemoryStorage


@pytest.mark.asyncio
async def test_stale_lease_entries_are_compacted() -> None:
    clock = ManualClock()
    backend = MemoryStorage("memory://", clock=clock)
    async with workhive.Hive(backend, manager=workhive.PluginManager(entry_points=False)) as hive:
        pool = hive.pool("jobs")
        await pool.push_many(range(20_000))
        for _ in range(20_000):
            item = await pool.claim("w")
            assert item is not None
            await pool.complete(item)
        index = backend._store.pools["jobs"]
        # Each completion leaves a stale lease entry; the heap must not keep them all.
        assert len(index.leases) < 10_000
        assert (await pool.stats()).done == 20_000


@pytest.mark.asyncio
async def test_claim_cost_does_not_scan_claimed_items() -> None:
    """Expired-lease settlement looks at the heap's head only: claimed items stay untouched."""
    clock = ManualClock()
    backend = MemoryStorage("memory://", clock=clock)
    async with workhive.Hive(backend, manager=workhive.PluginManager(entry_points=False)) as hive:
        pool = hive.pool("jobs")
        await pool.push_many(range(1000))
        held = await pool.claim_many(999, "w", lease=1000.0)
        clock.advance(1.0)
        index = backend._store.pools["jobs"]
        assert index.claimable_soon() == held[0].lease_expires_at
        last = await pool.claim("w")
        assert last is not None and index.ready.size == 0
