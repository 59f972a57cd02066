"""The SQLite backend against the full storage contract, including the stateful model test."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

from workhive.testing import StorageContract, StorageStatefulContract
from workhive_sqlite import SqliteStorage


class TestSqliteContract(StorageContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> SqliteStorage:
        return SqliteStorage(f"sqlite:///{tmp_path}/hive.db", clock=clock)


class TestSqliteStatefulContract(StorageStatefulContract):
    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> SqliteStorage:
        return SqliteStorage(f"sqlite:///{tmp_path}/hive.db", clock=clock)


class TestSqliteRealClockContract(StorageContract):
    """The same contract on the OS clock, the clock every process of a fleet shares."""

    supports_manual_clock = False

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> SqliteStorage:
        return SqliteStorage(f"sqlite:///{tmp_path}/hive.db")
