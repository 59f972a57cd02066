"""PostgreSQL against the rate-budget contract: one transaction per take, on the server's clock, several processes."""

from __future__ import annotations

import pathlib
from typing import Any

from postgres_server import schema_for, url_for

from workhive.testing.budgets import BudgetContract
from workhive.testing.clock import ManualClock
from workhive_postgres import PostgresStorage


class TestPostgresBudgetContract(BudgetContract):
    """On the server's own clock (plus the suite's offset): the clock every process of a fleet shares."""

    def make_backend(self, clock: ManualClock, tmp_path: pathlib.Path) -> PostgresStorage:
        return PostgresStorage(url_for(schema_for(tmp_path)), clock_offset=clock.offset)

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        return url_for(schema_for(tmp_path)), {}
