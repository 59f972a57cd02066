"""The memory backend against the rate-budget contract (``TakesBudget``)."""

from __future__ import annotations

import hashlib
import pathlib

from workhive.testing.budgets import BudgetContract
from workhive.testing.clock import ManualClock
from workhive_memory.backend import MemoryStorage


class TestMemoryBudgetContract(BudgetContract):
    def make_backend(self, clock: ManualClock, tmp_path: pathlib.Path) -> MemoryStorage:
        # A named store per test directory, so two backends of one test share it.
        return MemoryStorage(f"memory://b-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:24]}", clock=clock)
