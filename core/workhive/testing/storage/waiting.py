"""Waiting for work: rules N1-N2 of the storage contract.

``wait_for_work`` and the ``notify`` capability.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import asyncio

import pytest

from workhive.hive import Hive
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class WaitingRules(ContractBase):
    """Rules N1-N2: ``wait_for_work`` and the ``notify`` capability."""

    @pytest.mark.asyncio
    async def test_wait_for_work_returns_within_its_timeout(self, hive: Hive) -> None:
        """[N1] ``wait_for_work`` returns by the end of its timeout, also for a timeout of 0."""
        await asyncio.wait_for(hive.pool("idle").wait_for_work(0.05), timeout=10)
        await asyncio.wait_for(hive.pool("idle").wait_for_work(0), timeout=10)

    @pytest.mark.asyncio
    async def test_wait_for_work_wakes_on_push(self, hive: Hive) -> None:
        """[N1] with ``notify``, a push wakes a waiter long before its timeout."""
        if "notify" not in hive.storage.capabilities:
            pytest.skip("backend does not declare the 'notify' capability")
        pool = hive.pool("jobs")
        waiter = asyncio.ensure_future(pool.wait_for_work(60))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        await pool.push("wake up")
        await asyncio.wait_for(waiter, timeout=10)

    @pytest.mark.asyncio
    async def test_wait_for_work_wakes_when_a_delayed_item_or_a_lease_comes_due(
        self, hive: Hive, clock: ManualClock | None
    ) -> None:
        """[N2] with "notify", no push is needed: a delayed item coming due or a lease expiring wakes the waiter."""
        if "notify" not in hive.storage.capabilities:
            pytest.skip("backend does not declare the 'notify' capability")
        pool = hive.pool("jobs")
        await pool.push("much later", delay=100_000)
        await pool.push("soon", delay=0.2)
        waiter = asyncio.ensure_future(pool.wait_for_work(3600))
        await asyncio.sleep(0)  # it is waiting now, with the item not yet due
        await self.elapse(clock, 0.3)
        await asyncio.wait_for(waiter, timeout=60)  # generous: only a waiter that sleeps out its hour fails
        item = await self.must_claim(pool, "w1", lease=0.2)
        assert item.data == "soon"
        waiter = asyncio.ensure_future(pool.wait_for_work(3600))
        await asyncio.sleep(0)
        await self.elapse(clock, 0.3)
        await asyncio.wait_for(waiter, timeout=60)
        assert (await self.must_claim(pool, "w2")).id == item.id
