"""workhive storage and locks on PostgreSQL: ``postgresql://user:password@host:5432/db?schema=workhive``.

>>> import workhive  # doctest: +SKIP
>>> hive = workhive.open("postgresql://app@db.example/jobs", locks="postgresql://app@db.example/jobs")

``PostgresStorage`` and ``PostgresLocks`` are importable from here for direct
construction (tests, a clock offset). They load on first access, so
importing the plugin module (which imports this package) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workhive_postgres.backend import PostgresStorage
    from workhive_postgres.locks import PostgresLocks
    from workhive_postgres.url import PostgresConfig, parse_url, redact_url

__all__ = ["PostgresConfig", "PostgresLocks", "PostgresStorage", "parse_url", "redact_url"]

_HOMES = {
    "PostgresStorage": "workhive_postgres.backend",
    "PostgresLocks": "workhive_postgres.locks",
    "PostgresConfig": "workhive_postgres.url",
    "parse_url": "workhive_postgres.url",
    "redact_url": "workhive_postgres.url",
}


def __getattr__(name: str) -> Any:
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module 'workhive_postgres' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
