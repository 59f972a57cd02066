"""The PostgreSQL lock provider against the lock contract; each test gets a schema of its own, dropped afterwards."""

from __future__ import annotations

import pathlib

from postgres_server import schema_for, url_for

from workhive.locks import LockProvider
from workhive.testing.locks import LockContract
from workhive_postgres import PostgresLocks


class TestPostgresLockContract(LockContract):
    persistent_tokens = True

    def make_provider(self, tmp_path: pathlib.Path) -> LockProvider:
        return PostgresLocks(url_for(schema_for(tmp_path)))
