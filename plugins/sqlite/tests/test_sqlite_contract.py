"""The SQLite backend against the full storage contract, including the stateful model test."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

from workhive.testing import StorageContract, StorageStatefulContract
from workhive_sqlite import SqliteStorage


class TestSqliteContract(StorageContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> SqliteStorage:
        return SqliteStorage(f"sqlite:///{tmp_path}/hive.db", clock=clock)

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> SqliteStorage:
        return SqliteStorage(f"sqlite:///{tmp_path}/hive.db", clock=clock, create=False)

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        return f"sqlite:///{tmp_path}/hive.db", {}


class TestSqliteStatefulContract(StorageStatefulContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> SqliteStorage:
        return SqliteStorage(f"sqlite:///{tmp_path}/hive.db", clock=clock)


class TestSqliteRealClockContract(TestSqliteContract):
    """The same contract on the OS clock, the clock every process of a fleet shares."""

    supports_manual_clock = False
