"""The ``postgres`` plugin: storage at ``postgresql://`` / ``postgres://`` URLs and fleet-wide locks.

This module imports nothing heavy; the backend (and asyncpg) load when a URL is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workhive.hookspecs import hookimpl
from workhive.plugin_types import LocksPlugin, StoragePlugin

if TYPE_CHECKING:
    from workhive_postgres.backend import PostgresStorage
    from workhive_postgres.locks import PostgresLocks

__all__ = ["workhive_locks", "workhive_storage"]


def _open(url: str, **options: Any) -> PostgresStorage:
    from workhive_postgres.backend import PostgresStorage

    return PostgresStorage(url, **options)


def _open_locks(url: str) -> PostgresLocks:
    from workhive_postgres.locks import PostgresLocks

    return PostgresLocks(url)


@hookimpl
def workhive_storage() -> StoragePlugin:
    return StoragePlugin(
        name="postgres",
        factory=_open,
        description="PostgreSQL schema (SKIP LOCKED claims, LISTEN/NOTIFY), for fleets across machines",
        # ignore: mypy cannot see through attrs' `converter=tuple` in the core descriptor.
        schemes=("postgresql", "postgres"),  # type: ignore[arg-type]
        options=("create", "clock_offset", "backoff"),
    )


@hookimpl
def workhive_locks() -> LocksPlugin:
    return LocksPlugin(
        name="postgres",
        factory=_open_locks,
        description="fleet-wide locks on PostgreSQL advisory locks; postgresql://user@host/db?schema=workhive",
        schemes=("postgresql", "postgres"),  # type: ignore[arg-type]
    )
