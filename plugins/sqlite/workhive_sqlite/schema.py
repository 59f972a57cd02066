"""The database schema, its version, and the steps that migrate older files.

The version lives in ``PRAGMA user_version`` (a header field, readable
without a table) and the file is tagged with ``PRAGMA application_id`` so a
SQLite file written by some other program is refused rather than altered.

To change the schema, add ``sql/migrations/NNNN_what.sql``: migration NNNN
takes a file from version NNNN-1 to NNNN. Its statements run in one
``BEGIN IMMEDIATE`` transaction with the version bump, so a crash mid-way
leaves the file at the old version, untouched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from workhive.errors import SchemaVersionError, StorageUnavailable
from workhive_sqlite.sqlfiles import migrations, queries

__all__ = ["APPLICATION_ID", "MIGRATIONS", "SCHEMA_VERSION", "migrate"]

#: "WkHv" as a big-endian 32-bit integer: marks a file as a workhive store.
APPLICATION_ID = 0x576B4876

#: MIGRATIONS[i] takes a file from schema version i to i + 1: the statements of migration i + 1.
MIGRATIONS: tuple[Sequence[str], ...] = tuple(steps for _, steps in migrations())
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: str, begin: Callable[[], None] | None = None) -> int:
    """Bring the file at ``conn`` to ``SCHEMA_VERSION``; returns the version found before.

    ``begin`` takes the write lock (default: a plain ``BEGIN IMMEDIATE``).
    Raises ``SchemaVersionError`` for a file from a newer workhive and
    ``StorageUnavailable`` for a SQLite file that is not a workhive store.
    """
    if begin is None:
        conn.execute("BEGIN IMMEDIATE")
    else:
        begin()
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{path} has workhive schema version {version}, but this workhive-sqlite knows only up to "
                f"{SCHEMA_VERSION}: upgrade workhive-sqlite (pip install -U workhive-sqlite) or use another file",
                path=path,
                found=version,
                supported=SCHEMA_VERSION,
            )
        if app_id not in (0, APPLICATION_ID) or (version == 0 and _has_foreign_tables(conn)):
            raise StorageUnavailable(
                f"{path} is a SQLite database written by another program, not a workhive store; "
                "point the storage URL at a new file (e.g. sqlite:///.workhive/hive.db)",
                path=path,
            )
        for step in MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(version)


def _has_foreign_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute(queries()["user_tables"]).fetchone()
    return bool(row[0])
