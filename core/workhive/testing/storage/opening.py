"""Opening a store: rules F1-F5, M1 of the storage contract.

The plugin factory: ``create=False`` and several processes on one store.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import pathlib

import pytest

from workhive.errors import HiveNotFound
from workhive.hive import Hive
from workhive.plugin_manager import PluginManager
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


class OpeningRules(ContractBase):
    """Rules F1-F5, M1: the plugin factory: ``create=False`` and several processes on one store."""

    @pytest.mark.asyncio
    async def test_create_false_opens_only_an_existing_hive(
        self, clock: ManualClock | None, tmp_path: pathlib.Path
    ) -> None:
        """[F1] ``create=False``: HiveNotFound where no hive is, creating nothing; the hive itself once it exists."""
        place = tmp_path / "store"
        place.mkdir()
        with pytest.raises(HiveNotFound):
            async with Hive(self.make_missing_backend(clock, place), manager=PluginManager(entry_points=False)):
                pass
        assert list(place.iterdir()) == [], "create=False left something behind"
        async with Hive(self.make_backend(clock, place), manager=PluginManager(entry_points=False)) as hive:
            assert await hive.pools() == []
            item_id = await hive.pool("jobs").push("kept")
            async with Hive(
                self.make_missing_backend(clock, place), manager=PluginManager(entry_points=False)
            ) as existing:
                assert (await existing.pool("jobs").get(item_id)).data == "kept"

    @pytest.mark.asyncio
    async def test_several_processes_drain_one_pool(self, clock: ManualClock | None, tmp_path: pathlib.Path) -> None:
        """[C3][M1] "multiprocess": processes sharing one store never double-claim nor lose an item.

        Each process opens the store by ``multiprocess_store`` and drains the pool through the public API.
        """
        probe = self.make_backend(clock, tmp_path / "probe")
        if "multiprocess" not in probe.capabilities:
            pytest.skip("the backend does not declare the 'multiprocess' capability")
        from workhive.testing.multiprocess import drain_in_processes

        url, options = self.multiprocess_store(tmp_path)
        await drain_in_processes(url, options, tmp_path, processes=4, items=200)
