"""Shared state: rules K1 of the storage contract.

Namespaced keys and values with an optional ttl.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import pytest

from workhive.hive import Hive
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class SharedStateRules(ContractBase):
    """Rules K1: namespaced keys and values with an optional ttl."""

    @pytest.mark.asyncio
    async def test_shared_state_put_get_scan_delete(self, hive: Hive) -> None:
        """[K1] put, get, items and delete within a namespace; namespaces do not see each other."""
        cooldowns = hive.shared("cooldowns")
        other = hive.shared("other")
        await cooldowns.put("key-1", {"until": 12.5})
        await cooldowns.put("key-2", [1, "two"])
        await other.put("key-1", "elsewhere")
        assert await cooldowns.get("key-1") == {"until": 12.5}
        assert await cooldowns.get("missing", "dflt") == "dflt"
        assert await cooldowns.items() == {"key-1": {"until": 12.5}, "key-2": [1, "two"]}
        await cooldowns.put("key-1", "replaced")
        assert await cooldowns.get("key-1") == "replaced"
        assert await cooldowns.delete("key-1") is True
        assert await cooldowns.delete("key-1") is False
        assert await cooldowns.items() == {"key-2": [1, "two"]}
        assert await other.get("key-1") == "elsewhere"

    @pytest.mark.asyncio
    async def test_shared_state_expires(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[K1] a key with a ttl reads as absent once it has passed, for get, items and delete."""
        area = hive.shared("cooldowns")
        await area.put("short", 1, ttl=lease)
        await area.put("long", 2, ttl=lease * 100)
        await area.put("forever", 3)
        assert await area.get("short") == 1
        await self.elapse(clock, lease * 1.5)
        assert await area.get("short") is None
        assert await area.items() == {"long": 2, "forever": 3}
        assert await area.delete("short") is False

    @pytest.mark.asyncio
    async def test_shared_state_expires_exactly_at_its_ttl(self, hive: Hive, clock: ManualClock | None) -> None:
        """[K1] a key put with ``ttl`` reads as absent from ``now + ttl`` on (a moment before, it is there)."""
        manual = self.needs_manual_clock(clock)
        area = hive.shared("cooldowns")
        await area.put("k", 1, ttl=10.0)
        manual.advance(9.5)
        assert await area.get("k") == 1
        manual.advance(0.5)
        assert await area.get("k") is None
        assert await area.items() == {}
