"""The SQLite backend against the rate-budget contract, including several processes sharing one budget."""

from __future__ import annotations

import pathlib
import sqlite3
from typing import Any

import pytest

from workhive.budgets import BudgetTake
from workhive.testing.budgets import BudgetContract
from workhive.testing.clock import ManualClock
from workhive_sqlite import SqliteStorage
from workhive_sqlite.schema import SCHEMA_VERSION


class TestSqliteBudgetContract(BudgetContract):
    def make_backend(self, clock: ManualClock, tmp_path: pathlib.Path) -> SqliteStorage:
        return SqliteStorage(f"sqlite:///{tmp_path}/hive.db", clock=clock)

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        return f"sqlite:///{tmp_path}/hive.db", {}


@pytest.mark.asyncio
async def test_the_schedule_is_a_table_row_on_hive_time(tmp_path: pathlib.Path) -> None:
    """Ground truth: the take stored the new theoretical arrival time, in the schema version's own table."""
    clock = ManualClock()
    backend = SqliteStorage(f"sqlite:///{tmp_path}/hive.db", clock=clock)
    await backend.open()
    try:
        await backend.take_budget([[BudgetTake("K#ab:rpm", 2.0, 2.0, 3.0)]], 10.0)
    finally:
        await backend.close()
    with sqlite3.connect(tmp_path / "hive.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 4
        assert conn.execute("SELECT key, tat FROM budgets").fetchall() == [("K#ab:rpm", clock() + 6.0)]
