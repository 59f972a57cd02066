"""The PostgreSQL backend against the full storage contract and the model test.

Each test (and each model-test run) gets a schema of its own, dropped afterwards.
Time is the server's, moved forward by the test's ManualClock through ``clock_offset``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

from postgres_server import schema_for, url_for

from workhive.testing import StorageContract, StorageStatefulContract
from workhive_postgres import PostgresStorage


def _offset(clock: Callable[[], float] | None) -> Callable[[], float] | None:
    return getattr(clock, "offset", None)


def _storage(url: str, clock: Callable[[], float] | None, **options: Any) -> PostgresStorage:
    storage = PostgresStorage(url, clock_offset=_offset(clock), **options)
    # Claim marks move before every claim (not once a second), so every claim the suite
    # makes runs from marks moved by the claims and writes before it.
    storage.marks_every = 0.0
    return storage


class TestPostgresContract(StorageContract):
    """The contract with time moved by hand: the server's clock plus the test clock's offset."""

    clock_drift = 5.0

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> PostgresStorage:
        return _storage(url_for(schema_for(tmp_path)), clock)

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> PostgresStorage:
        return _storage(url_for(schema_for(tmp_path)), clock, create=False)

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        return url_for(schema_for(tmp_path)), {}


class TestPostgresRealClockContract(TestPostgresContract):
    """The same contract on the server's own running clock: time-dependent tests wait in real time."""

    supports_manual_clock = False
    clock_drift = 0.0


class TestPostgresStatefulContract(StorageStatefulContract):
    """The model test on the server's clock moved forward by the model's ManualClock."""

    clock_drift = 5.0  # the most real time one storage call takes (the server's clock runs meanwhile)

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> PostgresStorage:
        return _storage(url_for(schema_for(tmp_path)), clock)
