"""The memory backend against the full storage contract (including the model test)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

from workhive.testing import StorageContract, StorageStatefulContract
from workhive_memory.storage import MemoryStorage


class TestMemoryContract(StorageContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage("memory://", clock=clock)


class TestMemoryRealClockContract(StorageContract):
    """The same contract on the real clock: the path a database-clock backend takes."""

    supports_manual_clock = False

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage("memory://")


class TestMemoryStatefulContract(StorageStatefulContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> MemoryStorage:
        return MemoryStorage("memory://", clock=clock)
